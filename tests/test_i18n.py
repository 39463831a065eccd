"""What the code writes on a Chinese page is Chinese (issue #49 item 4): course_lib.i18n's table of
strings, compare_table's and the plots' ``lang``, and the chapter pages that glue each table and
figure twice (``name`` for the English page, ``name_zh`` for its twin)."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from course_lib import i18n, plots
from course_lib.report import compare_table

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n.*?^```$", re.S | re.M)
# a pasted table or figure: the directive (```{glue:md} name, ```{glue:figure} name) or the role
PASTE = re.compile(r"^```\{glue(?::md|:figure)?\} (\S+)$|\{glue:md\}`([^`:]+)`", re.M)
GLUE_FIGURE = re.compile(r"^```\{glue:figure\} (\S+)\n((?::[\w-]+:[^\n]*\n)*)\n(.+?)\n```$", re.S | re.M)
# the chapters whose tables and figures are glued per edition (the others: see the issue)
CONVERTED = ["01_flops", "02_scaling", "03_data", "04_dp_fsdp", "05_pipeline", "06_stability", "07_fp16", "08_moe", "09_distill", "10_pipeline_rl", "11_tensor_context", "12_failures", "15_fp8", "16_batch_size", "17_triage", "14_expert_parallel", "13_plan"]
# cells that still print English on both editions, by chapter and cell number (none now: chapter 11's
# layout explanation is glued per edition, layout.explain_layout)
STILL_ENGLISH: dict[str, list[int]] = {}


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BOOK / "_ext" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pages(stem: str) -> tuple[str, str]:
    return (BOOK / f"{stem}.md").read_text(encoding="utf-8"), (BOOK / "zh" / f"{stem}.md").read_text(encoding="utf-8")


# --- the table of strings -----------------------------------------------------------------------

def test_tr_is_the_text_in_english_and_its_entry_in_chinese() -> None:
    assert i18n.tr("measured", "en") == "measured" and i18n.tr("measured") == "measured"
    assert i18n.tr("measured", "zh") == "实测"
    assert i18n.tr("δ = {delta:g} s: first order", "zh", delta=30.0) == "δ = 30 s：一阶近似"
    assert i18n.tr("δ = {delta:g} s: first order", "en", delta=30.0) == "δ = 30 s: first order"
    assert i18n.tr_all(["measured", "ratio"], "zh") == ["实测", "比值"]
    # a word that reads two ways takes a context; without an entry for it, the plain word's
    assert i18n.tr("ok", "zh") == "符合" and i18n.tr("ok", "zh", context="run status") == "正常"
    assert i18n.tr_all(["precision", "recall"], "zh", context="retrieval") == ["精确率", "召回率"]
    assert i18n.tr("precision", "zh") == "精度" and i18n.tr("ok", "en", context="run status") == "ok"
    assert i18n.tr("N = √(C/120)", "zh") == "N = √(C/120)"      # symbols only: no entry needed


def test_tr_names_a_missing_entry_and_a_bad_language() -> None:
    with pytest.raises(ValueError, match="no Chinese entry for .not a course word.: add it to i18n_zh/<chapter>.json"):
        i18n.tr("not a course word", "zh")
    with pytest.raises(ValueError, match="lang must be one of"):
        i18n.tr("measured", "fr")


def test_the_table_is_one_across_its_files_and_a_conflict_names_both(tmp_path, monkeypatch) -> None:
    """Each chapter keeps its words in its own file; an English text two files translate differently
    is refused, naming both files, instead of one chapter's Chinese silently winning."""
    assert len(list(i18n.TABLE.glob("*.json"))) > 1 and i18n.ZH["measured"] == "实测"
    (tmp_path / "a.json").write_text('{"measured": "实测", "ratio": "比值"}', encoding="utf-8")
    (tmp_path / "b.json").write_text('{"measured": "测得"}', encoding="utf-8")
    monkeypatch.setattr(i18n, "TABLE", tmp_path)
    i18n._table.cache_clear()
    try:
        with pytest.raises(ValueError, match=r"'measured' is '实测' in a.json but '测得' in b.json"):
            i18n.tr("ratio", "zh")
        (tmp_path / "b.json").write_text('{"measured": "实测"}', encoding="utf-8")   # the same words: fine
        i18n._table.cache_clear()
        assert i18n.tr("ratio", "zh") == "比值"
    finally:
        i18n._table.cache_clear()


def test_every_chinese_entry_is_chinese_and_in_the_bundled_font() -> None:
    fonts = _load("course_fonts")
    have = fonts.font_chars(fonts.SUBSET)
    missing = {c for zh in i18n.ZH.values() for c in fonts.CJK.findall(zh)} - have
    assert not missing, f"the site's CJK font lacks {''.join(sorted(missing))}: pick other words"
    for en, zh in i18n.ZH.items():
        assert sorted(re.findall(r"\{[^}]*\}", en)) == sorted(re.findall(r"\{[^}]*\}", zh)), f"placeholders differ: {en!r}"


# --- compare_table and the plots ----------------------------------------------------------------

def test_compare_table_in_english_is_unchanged_and_in_chinese_aligns_wide_characters() -> None:
    rows = [("bytes", 2.0, 2.0), ("x", 1, 2)]
    assert compare_table(rows, tolerance=0.1) == (
        "quantity | measured | theory | ratio | within tol\n"
        "---------+----------+--------+-------+-----------\n"
        "bytes    | 2        | 2      | 1.000 | ok        \n"
        "x        | 1        | 2      | 0.500 | OFF       ")
    zh = compare_table([("字节", 2.0, 2.0), ("x", 1, 2)], tolerance=0.1, lang="zh").split("\n")
    assert zh[0].split(" | ")[1:3] == ["实测", "理论"] and "符合" in zh[2] and "超出" in zh[3]
    # a CJK character is two columns wide: "字节" (4 columns) lines up with "x" and 3 spaces
    assert zh[2].index("|") + 2 == zh[3].index("|") and zh[3].startswith("x    |")


def test_a_chinese_figure_draws_its_words_in_a_cjk_font_and_is_not_shown_twice() -> None:
    import matplotlib.pyplot as plt
    fig, ax = plots.figure(lang="zh")
    ax.plot([1, 2], [1, 2], label=i18n.tr("measured", "zh"))
    ax.set(xlabel=i18n.tr("sequence length $s$", "zh"), title="7B")
    ax.legend()
    assert plots.glued(fig) is fig and fig.number not in plt.get_fignums()
    texts = {t.get_text(): t.get_fontfamily() for t in fig.findobj(plt.Text) if t.get_text()}
    assert texts["序列长度 $s$"][0] == plots.cjk_font() and texts["实测"][0] == plots.cjk_font()
    import io
    with _no_warnings():
        fig.savefig(io.BytesIO(), format="png")      # no missing-glyph warning
    with pytest.raises(ValueError, match="lang must be one of"):
        plots.figure(lang="de")


class _no_warnings:
    def __enter__(self):
        import warnings
        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("error")

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)


# --- the pages ----------------------------------------------------------------------------------

def _pasted(text: str) -> list[str]:
    return [a or b for a, b in PASTE.findall(CODE_CELL.sub("", text))]


@pytest.mark.parametrize("stem", CONVERTED)
def test_the_chinese_page_pastes_the_chinese_table_or_figure_wherever_there_is_one(stem: str) -> None:
    en, zh = _pages(stem)
    glued_zh = set(re.findall(r'glue\("(\w+)_zh"', en))
    english_on_zh = [n for n in _pasted(zh) if n in glued_zh]
    assert not english_on_zh, f"book/zh/{stem}.md pastes the English {english_on_zh}; paste NAME_zh"
    zh_on_en = [n for n in _pasted(en) if n.endswith("_zh")]
    assert not zh_on_en, f"book/{stem}.md pastes the Chinese {zh_on_en}"
    assert [n + "_zh" if n in glued_zh else n for n in _pasted(en)] == _pasted(zh)


@pytest.mark.parametrize("stem", CONVERTED)
def test_no_cell_shows_a_figure_or_prints_a_table_in_english_on_both_pages(stem: str) -> None:
    """A cell's own output appears on both editions: a converted page's cells show nothing."""
    en, _ = _pages(stem)
    shown = [k for k, cell in enumerate(CODE_CELL.findall(en), 1)
             if (re.search(r"plt\.show\(|\bdisplay\(|^print\(", cell, re.M)
                 or (re.search(r"\.draw\(", cell) and "plots.glued(" not in cell))
             and k not in STILL_ENGLISH.get(stem, [])]
    assert not shown, f"book/{stem}.md: cells {shown} show their output on both editions; glue it per edition"


@pytest.mark.parametrize("stem", CONVERTED)
def test_each_glued_figure_is_named_captioned_and_described_in_both_editions(stem: str) -> None:
    en, zh = _pages(stem)
    cjk = re.compile(r"[\u4e00-\u9fff]")
    figures = {ed: list(GLUE_FIGURE.finditer(text)) for ed, text in (("en", en), ("zh", zh))}
    assert [m[1] + "_zh" for m in figures["en"]] == [m[1] for m in figures["zh"]]
    for ed, found in figures.items():
        for m in found:
            options = dict(re.findall(r"^:([\w-]+): (.*)$", m[2], re.M))
            assert options.get("name", "").startswith("fig-"), f"{ed} {m[1]}: no :name: (an unnumbered figure)"
            assert len(options.get("alt", "").split()) >= (1 if ed == "zh" else 12), f"{ed} {m[1]}: no real :alt:"
            if ed == "zh":
                assert cjk.search(m[3]) and cjk.search(options["alt"]), f"{m[1]}: caption or alt not in Chinese"
    assert [dict(re.findall(r"^:(name): (.*)$", m[2], re.M)) for m in figures["en"]] == \
        [dict(re.findall(r"^:(name): (.*)$", m[2], re.M)) for m in figures["zh"]]


def test_chapter_10_timelines_speak_the_page_s_language() -> None:
    """course_lib.rl's timeline drawer labels its rows, axis and legend in the language asked for,
    English by default (the lab's figures unchanged)."""
    import matplotlib.pyplot as plt

    from course_lib.rl import simulate as sim, task
    trace = sim.simulate("sync", task.LengthDist.lab(), 1, 2, 2, 3, t_decode=1e-3, t_train=2e-3)
    words = {}
    for lang in ("en", "zh"):
        fig, ax = plots.figure(lang=lang)
        legend = sim.timeline_legend(fig, lang=lang)
        sim.draw(trace, ax, lang=lang) if lang == "zh" else sim.draw(trace, ax)
        words[lang] = ([t.get_text() for t in ax.get_yticklabels()], ax.get_xlabel(),
                       [t.get_text() for t in legend.get_texts()])
        plots.glued(fig)
    assert words["en"][0] == ["actor 1", "learner"] and words["en"][1] == "time (s)"
    assert words["zh"][0] == ["actor 1", "学习器"] and words["zh"][1] == "时间（s）"
    assert words["zh"][2][0] == "学习器：优化器步" and words["en"][2][0] == "learner: optimizer step"
    plt.close("all")


def test_chapter_drawers_speak_the_page_s_language_and_english_by_default() -> None:
    """The chapter packages' own figures (chapter 2's IsoFLOP line, chapter 9's bill) take lang=."""
    from course_lib.distill import explore as distill_explore
    from course_lib.scaling import explore as scaling_explore
    for draw, english, chinese in ((lambda lang: scaling_explore.isoflop_figure(5.76e23, lang=lang),
                                    "predicted loss", "预测损失"),
                                   (lambda lang: distill_explore.cost_figure(lang=lang), "dollars", "美元")):
        en, zh = plots.glued(draw("en")), plots.glued(draw("zh"))
        assert en.axes[0].get_ylabel() == english and zh.axes[0].get_ylabel() == chinese
        assert zh.axes[0].yaxis.label.get_fontfamily()[0] == plots.cjk_font()


def test_each_file_names_each_english_text_once() -> None:
    """json keeps the later of two equal keys in one object silently: each file lists a text once
    (across files, the loader refuses two different translations)."""
    import json
    for path in sorted(i18n.TABLE.glob("*.json")):
        seen: list[str] = []

        def pairs(items, seen=seen):
            seen.extend(k for k, v in items)
            return dict(items)
        json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=pairs)
        twice = sorted({k for k in seen if seen.count(k) > 1})
        assert not twice, f"{path.name} gives these texts twice (the later entry would win): {twice}"
    assert len(i18n.ZH) > 500


def test_a_generated_sentence_takes_its_own_template_not_a_shorter_one_inside_it() -> None:
    """Chapter 16's law table showed 'the method 个中 fitted between losses …': the sentence was
    filled into the short template "{n} of {m}" (i18n.translate tried templates in file order)."""
    from course_lib import batch, nbtwin
    allow = nbtwin.load_allowlist(ROOT / "book" / "zh" / "latin_allowlist.txt")
    zh = i18n.translate(batch.law("tiny_gpt")["limits"], "zh")
    assert zh.startswith("在损失") and nbtwin.latin_words(zh, allow) == [], zh
    assert i18n.translate("3 of 4", "zh") == "4 个中 3 个"


def test_translate_fills_a_template_with_the_values_a_drawn_text_shows() -> None:
    assert i18n.translate("theory, T/E = 8", "zh") == "理论，T/E = 8"
    assert i18n.translate("δ = 30 s: first order", "zh") == "δ = 30 s：一阶近似"
    assert i18n.translate("measured", "zh") == "实测" and i18n.translate("measured", "en") == "measured"
    assert i18n.translate("BF16", "zh") == "BF16" and i18n.translate("", "zh") == ""
    with pytest.raises(ValueError, match="no Chinese entry for 'a label nobody wrote 3'"):
        i18n.translate("a label nobody wrote 3", "zh")


def test_translated_turns_every_word_a_figure_shows_and_leaves_english_alone() -> None:
    fig, ax = plots.figure()
    ax.plot([0, 1], [0, 1], label="theory, T/E = 8")
    ax.set_yticks([0, 1], ["actor 1", "learner"])
    ax.set(title="Monte Carlo", xlabel="step")
    ax.legend()
    assert plots.translated(fig, "en") is fig and ax.get_title() == "Monte Carlo"
    plots.glued(plots.translated(fig, "zh"))
    fig.canvas.draw()                                  # fixed tick labels are re-drawn from their formatter
    assert ax.get_title() == "蒙特卡洛" and ax.get_xlabel() == "步数"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["actor 1", "学习器"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["理论，T/E = 8"]


TEXT_ALLOWED = {"softmax", "nat"}     # a function's name as the code writes it; a unit


@pytest.mark.parametrize("stem", CONVERTED)
def test_words_inside_text_in_the_chinese_formulas_are_chinese(stem: str) -> None:
    """\\text{...} in a Chinese page's math is a word of the sentence (\\text{（完整）}), Chinese (a Latin
    term may stand in it: 每 token 的 FLOP); a subscript (d_\\text{in}, \\tau^\\star_\\text{Daly}) is part of a
    symbol's name and stays."""
    _, zh = _pages(stem)
    prose = CODE_CELL.sub("", zh)
    english = [m[1] for m in re.finditer(r"(?<![_^])\\text\{([^{}]*)\}", prose)
               if re.search(r"[a-z]{2,}", m[1]) and not re.search(r"[\u4e00-\u9fff]", m[1])
               and m[1].strip() not in TEXT_ALLOWED]
    assert not english, f"book/zh/{stem}.md: English words in \\text{{}}: {english}"


@pytest.mark.parametrize("stem", CONVERTED)
def test_glued_figures_pass_the_built_site_s_alt_and_caption_rules(stem: str) -> None:
    """tests/test_site_static.py reads the built figures: alt text and caption of at least four
    words, split at spaces as the site test splits them (a Chinese sentence needs its Latin terms
    and numbers spaced off, as the book writes them, to count)."""
    for page in _pages(stem):
        for m in GLUE_FIGURE.finditer(page):
            alt = re.search(r"^:alt: (.*)$", m[2], re.M)[1]
            caption = re.sub(r"\{glue:text\}`[^`]*`", "1.0", m[3])
            assert len(alt.split()) >= 4 and len(caption.split()) >= 4, f"{m[1]}: alt or caption under four words"
