"""The words the course's code writes on a book page, in the book's two languages (issue #49).

A chapter page and its Chinese twin run the same code cells byte for byte (tests/test_editions.py),
so a table or a figure whose text is English would appear in English on both. Instead the shared
cell draws it twice from the same result, once per language, and glues both (``fig_x`` and
``fig_x_zh``); each edition pastes its own. The Chinese words come from this one table, looked up by
the English text (gettext-style, like the grader's messages in ``course_lib/grading/i18n.py``, which
live apart because the grader's tables are hidden from a graded run's sandbox)::

    ax.set(xlabel=tr("sequence length $s$", lang))
    tr("{n} ranks", "zh", n=4)          # -> "4 个进程": values are inserted after translating

Math in a label stays math (``$s$``): matplotlib draws it in its own fonts, the words around it in
the CJK font (``plots.glued``). A missing entry is an error that names the text, never an English
word left silently on a Chinese page: tests/test_i18n.py draws each converted figure in Chinese.
The Chinese text must be in the site's bundled CJK font (book/_ext/course_fonts.py), like the pages'.
"""
from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from course_lib._validate import choice

LANGS = ("en", "zh")

ZH: Mapping[str, str] = MappingProxyType({
    # --- course_lib.report.compare_table ---
    "quantity": "量",
    "measured": "实测",
    "theory": "理论",
    "ratio": "比值",
    "within tol": "在容差内",
    "ok": "符合",
    "OFF": "超出",
    # --- chapter 1: FLOPs ---
    "causal": "因果",
    "full matrix": "完整矩阵",
    "source notes  $2Ls/N$ (wrong)": "原始笔记  $2Ls/N$（错误）",
    "sequence length $s$": "序列长度 $s$",
    "attention FLOPs / dense FLOPs": "注意力 FLOP / 稠密 FLOP",
    "7B model (L=32, d=4096)": "7B 模型（L=32，d=4096）",
    "accelerator": "加速器",
    "dense peak": "稠密峰值",
    "training dtype": "训练数据类型",
    "HBM": "HBM",
    "link, per direction": "链路（单向）",
    # --- chapter 12: failures ---
    "GPUs": "GPU 数",
    "job MTBF": "作业 MTBF",
    "failures in 90 days": "90 天内的故障数",
    "P(a day without failure)": "P（一天无故障）",
    "δ = {delta:g} s: first order": "δ = {delta:g} s：一阶近似",
    "exact (Daly)": "精确解（Daly）",
    "Monte Carlo": "蒙特卡洛",
    "compute between checkpoints τ (hours)": "两次检查点之间的计算时间 τ（小时）",
    "goodput": "有效吞吐",
    "job MTBF {mtbf:.1f} h, restart {restart:.0f} min; vertical lines: √(2δM)":
        "作业 MTBF {mtbf:.1f} h，重启 {restart:.0f} min；竖线：√(2δM)",
    "save blocks δ = {delta:g} s": "保存阻塞 δ = {delta:g} s",
    "GPUs in the job": "作业的 GPU 数",
    "exact goodput at τ = √(2δM)": "τ = √(2δM) 时的精确有效吞吐",
    "save δ": "保存 δ",
    "δ/M": "δ/M",
    "Young (min)": "Young（min）",
    "Daly (min)": "Daly（min）",
    "exact (min)": "精确解（min）",
    "goodput at Young": "Young 间隔下的有效吞吐",
    "goodput at exact": "精确间隔下的有效吞吐",
    "save": "保存方式",
    "blocks δ": "阻塞 δ",
    "Young τ": "Young τ",
    "goodput if R = 0": "R = 0 时的有效吞吐",
    "synchronous, gathered (one writer, 50 GB/s)": "同步、汇总到一处（单个写入者，50 GB/s）",
    "synchronous, sharded (16,384 writers, 2 TB/s storage)": "同步、分片（16,384 个写入者，存储 2 TB/s）",
    "asynchronous, sharded (copy to host at 25 GB/s)": "异步、分片（以 25 GB/s 拷贝到主机内存）",
    "Monte Carlo vs formula": "蒙特卡洛与公式",
    "simulated": "模拟",
    "formula": "公式",
    "goodput, τ = 30 min, δ = 2 min": "有效吞吐，τ = 30 min，δ = 2 min",
    "work lost per failure (s)": "每次故障损失的计算（s）",
    "per-GPU MTBF {mtbf:.1f} years, restart {restart:.0f} min":
        "单卡 MTBF {mtbf:.1f} 年，重启 {restart:.0f} min",
})


def tr(text: str, lang: str = "en", **values: object) -> str:
    """``text`` in ``lang``: itself in English, its entry of :data:`ZH` in Chinese; with ``values``
    the text is a ``str.format`` template, filled after translating. Raises ValueError for an unknown
    language and for English text with no Chinese entry (naming it, so the fix is one line here)."""
    choice("lang", lang, LANGS)
    if lang == "zh":
        if text not in ZH:
            raise ValueError(f"no Chinese entry for {text!r}: add it to course_lib/i18n.py ZH")
        text = ZH[text]
    return text.format(**values) if values else text


def tr_all(texts: list[str] | tuple[str, ...], lang: str = "en") -> list[str]:
    """Each of ``texts`` in ``lang`` (a table's header row)."""
    return [tr(t, lang) for t in texts]
