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
