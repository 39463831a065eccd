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
