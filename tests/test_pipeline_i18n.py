"""Chapter 5's Gantt charts speak the page's language (issue #49 item 4): ``gantt.draw(lang=...)``
writes its own words (rank rows, the time axis, the legend) in Chinese for the Chinese page and is
unchanged in English, the default, which the lab's stored figures and chapter 13 rely on."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from course_lib import plots
from course_lib.pipeline import gantt

TL = gantt.Timeline(2, [gantt.Event(0, "F", 0, 0.0, 1.0), gantt.Event(1, "F", 0, 1.0, 2.0),
                        gantt.Event(1, "B", 0, 2.0, 4.0), gantt.Event(0, "B", 0, 4.0, 6.0),
                        gantt.Event(0, "W", 0, 6.0, 7.0), gantt.Event(0, "recv", 0, 1.0, 4.0)])


def _words(ax) -> tuple[list[str], str, list[str]]:
    return ([t.get_text() for t in ax.get_yticklabels()], ax.get_xlabel(),
            [t.get_text() for t in ax.get_legend().get_texts()])


def test_gantt_draws_in_english_by_default_and_in_chinese_when_asked() -> None:
    english = _words(gantt.draw(TL, unit="ms"))
    assert english == (["rank 1", "rank 0"], "time (ms)", ["forward", "backward", "weight\ngradient", "waiting\nin recv"])
    assert _words(gantt.draw(TL, unit="ms", lang="en")) == english
    fig, ax = plots.figure(lang="zh")
    gantt.draw(TL, ax, unit="units of $t_f$", lang="zh")
    rows, xlabel, legend = _words(ax)
    assert rows == ["rank 1", "rank 0"] and xlabel == "时间（单位 $t_f$）"
    assert legend == ["前向", "反向", "权重\n梯度", "在 recv\n中等待"]
    plots.glued(fig)
    plt.close("all")


def test_the_caller_s_rows_and_names_are_kept_as_given() -> None:
    rows = ["行 0", "行 1"]
    ax = gantt.draw(TL, rows=rows, names={"recv": "等待消息"}, lang="zh")
    assert [t.get_text() for t in ax.get_yticklabels()] == rows[::-1]
    assert _words(ax)[2][-1] == "等待消息"
    with pytest.raises(ValueError, match="lang must be one of"):
        gantt.draw(TL, lang="fr")
    plt.close("all")
