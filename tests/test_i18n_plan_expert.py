"""Chapters 11, 13 and 14's generated words in the page's language (issue #49 item 4): the layout
planner's explanation, the plan's summary, chapter 13's tables and figures and chapter 14's overlap
timeline take ``lang``; in English they are byte for byte what they were (the labs' stored outputs
and the CLI depend on it)."""
from __future__ import annotations

import re


from course_lib import plots

CJK = re.compile(r"[\u4e00-\u9fff]")


def _texts(fig) -> list[str]:
    from matplotlib.text import Text
    fig.canvas.draw()
    return [t.get_text() for t in fig.findobj(Text) if t.get_text()]


def test_chapter_14_overlap_timeline_speaks_the_page_s_language() -> None:
    """expert.overlap_runs.draw_both on the cached run: English rows and legend as before, Chinese
    ones with lang="zh", every word of the Chinese figure Chinese."""
    import matplotlib.pyplot as plt

    from course_lib.expert import overlap_runs as O
    ranks = O.load_overlap_cache()["ranks"]
    en, en_axes = O.draw_both(ranks)
    zh, zh_axes = O.draw_both(ranks, lang="zh")
    assert [t.get_text() for t in en_axes[0].get_yticklabels()][::-1] == [
        "rank 0 compute", "rank 0 all-to-all", "rank 1 compute", "rank 1 all-to-all"]
    assert en_axes[0].get_title() == "serial" and en_axes[0].get_xlabel() == "time (ms)"
    assert [t.get_text() for t in zh_axes[0].get_yticklabels()][::-1] == [
        "rank 0 计算", "rank 0 all-to-all", "rank 1 计算", "rank 1 all-to-all"]
    assert zh_axes[0].get_title() == "串行" and zh_axes[1].get_title() == "重叠"
    assert zh_axes[0].get_xlabel() == "时间（ms）"
    assert "共享\n专家" in [t.get_text() for t in zh_axes[0].get_legend().get_texts()]
    assert zh_axes[0].title.get_fontfamily()[0] == plots.cjk_font()
    plt.close("all")


def test_the_layout_planner_explains_itself_in_the_page_s_language() -> None:
    """layout.explain_layout: the same search and reasons as layout().explanation, English byte for
    byte, Chinese with every word Chinese (the shapes, ZeRO-n and recompute=... are the planner's
    own notation); chapter 11 glues both for Megatron-LM 1T with 2021's tools."""
    from course_lib import layout
    args = dict(**layout.megatron_1t(), **layout.MEGATRON_2021)
    en = layout.layout(**args).explanation
    assert layout.explain_layout("en", **args) == en
    assert en.splitlines()[1].startswith("With a smaller TP: TP 4 · CP 1 · PP 64 · DP 12, ZeRO-0, recompute=full takes +")
    zh = layout.explain_layout("zh", **args)
    assert len(zh.splitlines()) == len(en.splitlines())
    assert zh.splitlines()[0].startswith("TP 8 · CP 1 · PP 64 (v=2) · DP 6，ZeRO-0，recompute=full，每条流水线 m=512 个微批次")
    assert "若不做激活重算：没有放得下的布局（最小的 TP 8 · CP 1 · PP 128 · DP 3 每块 GPU 需要" in zh
    words = re.sub(r"TP \d+ · CP \d+ · PP \d+( \(v=\d+\))? · DP \d+|ZeRO-\d|recompute=\w+|all-reduce|K/V|DP/ZeRO",
                   "", zh)
    assert not re.search(r"[a-z]{2,}", words), words
    assert layout.explain([], lang="zh") == "没有放得下的布局" and layout.explain([]) == "no layout fits"


def test_the_plan_summary_speaks_the_page_s_language() -> None:
    """Plan.render(lang): every line tagged with its chapter in either language, the planner's own
    sentences (sizing, caveats, the batch note) looked up whole with their numbers; the English
    unchanged (the 34B question of chapter 13, whose numbers the page prints)."""
    from course_lib.plan import plan
    p = plan(n_params=34e9, n_tokens=8e12, gpu="H100", n_gpus=1024, mfu=0.45)
    en, zh = p.render().splitlines(), p.render("zh").splitlines()
    assert p.render("en") == p.render() == str(p) and len(en) == len(zh)
    assert en[0].startswith("[ch02 sizing]    34B parameters, 8T tokens (235 per parameter; given); 6ND = 1.63e+24")
    assert en[4].startswith("[ch01 MFU]       45.0% (given; the layout estimates ")
    assert zh[0].startswith("[第 2 章 规模]      34B 参数，8T token（每个参数 235 个；给定）；6ND = 1.63e+24 FLOP")
    assert zh[4].startswith("[第 1 章 MFU]       45.0%（给定；布局估计为 ")
    assert zh[-1].startswith("[第 7 章 数值]      4 个微批次的梯度累加，以及 1024 个 rank 上的 DP 归约")
    # the text after the tags starts in one column (a CJK character two columns wide)
    from course_lib.report import text_width as _columns
    assert len({_columns(line[:line.index("]") + 1]) + len(line[line.index("]") + 1:]) - len(line[line.index("]") + 1:].lstrip())
                for line in zh}) == 1
    fp8 = plan(n_params=70e9, n_tokens=15e12, gpu="A100", n_gpus=2048, dtype="fp8").render("zh")
    assert "A100 没有 FP8 张量核心" in fp8 and "FP8 E4M3 在 448 处饱和" in fp8


def test_chapter_13_figures_speak_the_page_s_language() -> None:
    """plan.explore's MFU sweeps and published-ratio figures take lang=; English by default."""
    import matplotlib.pyplot as plt

    from course_lib.plan.explore import mfu_figure, ratio_figure
    sweeps = {"width": [(1024, 0.2), (2048, 0.3)], "seq_len": [(2048, 0.4), (8192, 0.3)],
              "n_gpus": [(128, 0.45), (512, 0.4)]}
    en, zh = mfu_figure(sweeps), plots.glued(mfu_figure(sweeps, lang="zh"))
    assert en.axes[0].get_title() == "wider: bigger GEMMs" and zh.axes[0].get_title() == "更宽：GEMM 更大"
    assert zh.axes[1].get_xlabel() == "序列长度（7B，512 块 GPU）" and en.axes[0].get_ylabel() == "MFU (planner)"
    rows = [{"name": "Llama 3 405B", "ratio": 0.85, "within": True}, {"name": "PaLM 540B", "ratio": 0.67, "within": False}]
    r_en, r_zh = ratio_figure(rows), plots.glued(ratio_figure(rows, lang="zh"))
    assert r_en.axes[0].get_xlabel().startswith("planner / published") and r_zh.axes[0].get_xlabel().startswith("规划器 / 公开值")
    assert [t for t in _texts(r_zh) if re.search(r"[a-z]{2,}", t) and not t.startswith(("Llama", "PaLM"))] == []
    assert all(CJK.search(t) is None for t in _texts(en))
    plt.close("all")
