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

import re
from collections.abc import Mapping
from types import MappingProxyType

from course_lib._validate import choice

LANGS = ("en", "zh")
WORD = re.compile(r"[A-Za-z]{2,}")     # text without a word of two letters is symbols, the same in Chinese

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
    # --- chapter 6: loss stability ---
    "part": "组成部分",
    "bytes": "字节数",
    "what it decides": "它决定什么",
    "weights (FP32 master)": "权重（FP32 主副本）",
    "the model": "模型本身",
    "AdamW moments m, v": "AdamW 的矩 m、v",
    "2 × 4 bytes per parameter": "每个参数 2 × 4 字节",
    "step counter": "步数计数器",
    "t = {t}: LR schedule and bias correction": "t = {t}：学习率调度与偏差修正",
    "data loader": "数据加载器",
    "seed {seed}, position {position}": "种子 {seed}，位置 {position}",
    "loss scaler": "损失缩放器",
    "scale {scale:g}, good steps {good}": "缩放系数 {scale:g}，连续正常步数 {good}",
    "RNG state": "随机数生成器状态",
    "PyTorch generator and Python's random": "PyTorch 的生成器和 Python 的 random",
    "corrupted batches 100–114": "被破坏的 batch 100–114",
    "LR ×50 at steps 100–102": "第 100–102 步学习率 ×50",
    "clean run": "干净的运行",
    "perturbed run": "受扰动的运行",
    "step": "步数",
    "30-step warmup": "30 步预热",
    "no warmup": "不预热",
    "peak LR 0.4: warmup vs none": "峰值学习率 0.4：预热与不预热",
    "training loss (nats/byte)": "训练损失（nat/字节）",
    "median |Δw|, no clipping": "|Δw| 的中位数，不裁剪",
    "median |Δw|, gradient clipped from norm {norm:.1f} to 0.1": "|Δw| 的中位数，梯度范数从 {norm:.1f} 裁剪到 0.1",
    "first AdamW step, LR 0.4": "AdamW 第一步，学习率 0.4",
    "theory η": "理论 η",
    "clean": "干净",
    "corrupted window": "被破坏的窗口",
    "LR jump": "学习率跳升",
    "no warmup, LR 0.4": "不预热，学习率 0.4",
    "none": "无",
    "run": "运行",
    "steps flagged": "标记的步数",
    "first flagged steps": "最先标记的几步",
    "corrupted positions": "被破坏的位置",
    "unguarded run": "未受保护的运行",
    "undone by the rollback": "被回滚撤销",
    "guarded run (kept)": "受保护的运行（保留）",
    "optimizer step": "优化器步数",
    "training loss": "训练损失",
    "spike → rollback → skip → continue": "尖峰 → 回滚 → 跳过 → 继续",
    "guarded run vs clean run": "受保护的运行 / 干净的运行",
    "unguarded run vs clean run": "未受保护的运行 / 干净的运行",
    "final validation loss": "最终验证损失",
    "format": "格式",
    "largest": "最大值",
    "smallest normal": "最小正规数",
    "smallest subnormal": "最小次正规数",
    "precision (eps)": "精度（eps）",
    "value": "数值",
    "→ FP16": "→ FP16",
    "→ BF16": "→ BF16",
    "overflow": "溢出",
    "zero": "变成零",
    "subnormal": "次正规数",
    "normal": "正规数",
    "tokens / batch": "每个 batch 的 token 数",
    "flushed to 0: measured": "变成 0：实测",
    "predicted": "预测",
    "weight-gradient error": "权重梯度误差",
    "FP32 values": "FP32 的值",
    "FP16 (as stored)": "FP16（存储后）",
    "FP16 × 2^16 (as stored)": "FP16 × 2^16（存储后）",
    "← exact zeros": "← 恰好为零",
    "smallest subnormal 2^-24": "最小次正规数 2^-24",
    "smallest normal 2^-14": "最小正规数 2^-14",
    "largest 65504": "最大值 65504",
    "count": "个数",
    "logit gradients, 2048 tokens per batch": "logit 梯度，每个 batch 2048 个 token",
    " + loss scaling": " + 损失缩放",
    "FP16 step with non-finite loss (all cells)": "损失不是有限值的 FP16 步（所有配置）",
    "FP16 max 65504": "FP16 最大值 65504",
    "max |q·kᵀ| (before 1/√d)": "max |q·kᵀ|（乘 1/√d 之前）",
    "peak LR 0.4, warmup 30, clip 1.0": "峰值学习率 0.4，预热 30 步，裁剪 1.0",
    "yes": "是",
    "no": "否",
    " + scaling": " + 缩放",
    "run status\x04ok": "正常",
    "run status\x04diverged": "发散",
    "run status\x04stalled": "停滞",
    " at step {step}": "（第 {step} 步）",
    "precision": "精度",
    "warmup": "预热",
    "clipping": "裁剪",
    "outcome": "结果",
    "skipped steps": "跳过的步数",
    "max loss after step 5": "第 5 步之后的最大损失",
    "final val. loss": "最终验证损失",
    # --- chapter 10: pipeline RL ---
    "learner: optimizer step": "学习器：优化器步",
    "actor decoding, {k} of {slots} slots busy": "actor 解码，{slots} 个槽位中 {k} 个忙碌",
    "blank: waiting for weights": "空白：等待权重",
    "actor {k}": "actor {k}",
    "learner": "学习器",
    "time (s)": "时间（s）",
    "α = {alpha}: E[L] = {mean:,.0f} tokens": "α = {alpha}：E[L] = {mean:,.0f} token",
    "simulator, α = 1.2 (20 steps)": "模拟器，α = 1.2（20 步）",
    "sequences per synchronous step $n$": "每个同步步的序列数 $n$",
    "generator utilisation": "生成器利用率",
    "The straggler tax: E[L] / E[max of n lengths]": "掉队者税：E[L] / E[n 个长度的最大值]",
    "limit  | E[L]   | std    | U_sync (n = 512)": "上限   | E[L]   | 标准差 | U_sync (n = 512)",
    "every length of the 16,384 case doubled: U_sync = {doubled:.3f} (unchanged: {plain:.3f})":
        "把上限 16,384 那一行的每个长度都加倍：U_sync = {doubled:.3f}（不变：{plain:.3f}）",
    "{mode} (simulated): utilisation {u:.2f}, {steps:.0f} optimizer steps/s":
        "{mode}（模拟）：利用率 {u:.2f}，每秒 {steps:.0f} 个优化器步",
    "mode     | utilisation | tokens/s | steps/s | mean lag | sequences with >1 version":
        "模式     | 利用率      | tokens/s | steps/s | 平均滞后 | 由多个版本写成的序列",
    "B = {B:2d}: mean lag (versions)": "B = {B:2d}：平均滞后（版本数）",
    "mean {lag:.2f}": "平均 {lag:.2f}",
    "lag of a token (versions)": "token 的滞后（版本数）",
    "share of trained tokens": "占训练 token 的比例",
    "PipelineRL, lab setting": "PipelineRL，实验的设置",
    "mean lag of its tokens": "其 token 的平均滞后",
    "share written by >1 version": "由多个版本写成的比例",
    "sequence length (tokens)": "序列长度（token）",
    "long sequences carry the stale tokens": "陈旧的 token 都在长序列里",
    "PipelineRL on 3 real processes: {steps} optimizer steps in {wall:.2f} s, utilisation {u:.2f}":
        "3 个真实进程上的 PipelineRL：{wall:.2f} s 内 {steps} 个优化器步，利用率 {u:.2f}",
    "|log π_generator − log π_learner|, same weights": "|log π_generator − log π_learner|，权重相同",
    "mean": "平均",
    "max": "最大",
    "fp32 KV-cache decoder vs full forward": "fp32 KV 缓存解码器对比完整前向",
    "bf16 KV-cache decoder vs fp32 full forward": "bf16 KV 缓存解码器对比 fp32 完整前向",
    "real run, KV cache from older weights vs fresh": "真实运行，旧权重的 KV 缓存对比重新计算",
    " (max over the vocabulary, {n} swaps)": "（词表上的最大值，{n} 次换入）",
    "batch | mode     | util.  | tokens/s  | steps/h | lag": "batch | 模式     | 利用率 | tokens/s  | steps/h | 滞后",
    # --- chapter 2: scaling ---
    "budget": "预算",
    "fit": "拟合",
    "hoffmann": "hoffmann",
    "hoffmann (unrounded)": "hoffmann（未舍入）",
    "besiroglu": "besiroglu",
    "20 tokens/param": "每参数 20 个 token",
    "N* at 5.76e23": "5.76e23 时的 N*",
    "Hoffmann Table 3 (Approach 1)": "Hoffmann Table 3（方法 1）",
    "Hoffmann Table 3": "Hoffmann Table 3",
    "compute C (FLOP)": "计算量 C（FLOP）",
    "optimal parameters N*": "最优参数量 N*",
    "tokens per parameter D*/N*": "每参数 token 数 D*/N*",
    "Table 3: N": "Table 3：N",
    "N* Hoffmann (printed)": "N* Hoffmann（印出的）",
    "N* Besiroglu": "N* Besiroglu",
    "model": "模型",
    "D (tokens)": "D（token）",
    "tokens/param": "token/参数",
    "source": "出处",
    "iso-loss configuration": "等损失配置",
    "Hoffmann (printed)": "Hoffmann（印出的）",
    "Besiroglu refit": "Besiroglu 重拟合",
    "smallest reachable N": "能达到的最小 N",
    "source notes: 2/3 N on 2× D, '+33 %'": "原始笔记：2/3 N 配 2× D，“+33 %”",
    "model size N / N*": "模型大小 N / N*",
    "extra training compute at equal loss (%)": "损失相同时额外的训练计算量（%）",
    "lifetime inference tokens / D*": "生命周期推理 token 数 / D*",
    "optimal N / N*": "最优 N / N*",
    "total FLOPs saved vs Chinchilla (%)": "相对 Chinchilla 节省的总 FLOP（%）",
    "Approach 2 minima": "方法 2 的最低点",
    "parameters N": "参数量 N",
    "validation loss (nats/byte)": "验证损失（nat/字节）",
    "measured IsoFLOP curves (markers), Approach 3 fit (lines)": "实测的 IsoFLOP 曲线（点），方法 3 的拟合（线）",
    "C (FLOP)": "C（FLOP）",
    "C = 6ND (FLOP)": "C = 6ND（FLOP）",
    "rule / fit": "法则 / 拟合",
    "predicted loss": "预测损失",
    "days": "天数",
    "20 tokens/param: {n}": "每参数 20 个 token：{n}",
    "parameters N (D = C/6N)": "参数量 N（D = C/6N）",
    "IsoFLOP line, C = {c:.2g} FLOP": "IsoFLOP 线，C = {c:.2g} FLOP",
    # --- chapter 9: distillation ---
    "1T output tokens at $25/MTok: ${seed:.1f}M;  through the Batch API (50% off): ${batch:.1f}M":
        "1T 输出 token，按 $25/MTok：${seed:.1f}M；走 Batch API（五折）：${batch:.1f}M",
    "scenario for 1T usable tokens": "1T 可用 token 的情形",
    "billed output": "计费的输出",
    "input": "输入",
    "bill": "账单",
    "USD per usable MTok": "每百万可用 token 的美元",
    "seed: output only, list price": "原始笔记：只算输出，原价",
    "+ prompts (r = 0.2)": "+ 提示词（r = 0.2）",
    "+ prompts, batch API": "+ 提示词，batch API",
    "agentic: r = 10, 90% cached, batch": "智能体：r = 10，90% 命中缓存，batch",
    "agentic: r = 10, no cache, list": "智能体：r = 10，无缓存，原价",
    "reasoning: h = 3 hidden per visible, r = 0.2, batch": "推理：每个可见 token 带 h = 3 个隐藏 token，r = 0.2，batch",
    "N (per token)": "N（每 token）",
    "published GPU-hours": "公开的 GPU 小时",
    "6ND at 40 % MFU": "6ND，MFU 40 %",
    "implied MFU": "推算的 MFU",
    "USD at an assumed 2 USD/h": "按假定的每小时 2 美元计",
    "Llama 3.1 405B": "Llama 3.1 405B",
    "DeepSeek-V3 (37B active)": "DeepSeek-V3（激活 37B）",
    "list price": "原价",
    "batch ({off:.0f}% off)": "batch（减 {off:.0f}%）",
    "list, 3 hidden reasoning tokens per visible": "原价，每个可见 token 带 3 个隐藏推理 token",
    "pretraining {n:.0f}B on {d:.3g}T tokens (6ND at {mfu:.0f}% MFU): {cost} at an assumed ${price:.2f}/GPU-h":
        "预训练 {n:.0f}B、{d:.3g}T token（6ND，MFU {mfu:.0f}%）：{cost}，按假定的 ${price:.2f}/GPU 小时",
    "teacher tokens you can train on": "能拿来训练的教师 token",
    "dollars": "美元",
    "Buying {name} outputs ({r:g} input tokens per output)": "购买 {name} 的输出（每个输出 token 配 {r:g} 个输入 token）",
    "usable tokens": "可用 token",
    "teacher N": "教师 N",
    "hidden/visible": "隐藏/可见",
    "batch off": "batch 折扣",
    "bill (USD)": "账单（美元）",
    "teacher pretraining (USD)": "教师预训练（美元）",
    "assumed USD/GPU-h": "假定的每 GPU 小时美元",
    "bill / pretraining": "账单 / 预训练",
    "break-even tokens": "持平的 token 数",
    "(a) sampled text": "(a) 采样文本",
    "(b) top-{k} logprobs": "(b) top-{k} 对数概率",
    "(c) full logits": "(c) 完整 logits",
    "real corpus text, no teacher": "真实语料文本，无教师",
    "same compute (768 steps): best checkpoint": "计算量相同（768 步）：最好的检查点",
    "one pass: compute grows with tokens": "只过一遍：计算量随 token 增长",
    "teacher ({loss:.2f})": "教师（{loss:.2f}）",
    "teacher output tokens bought": "买下的教师输出 token",
    "dollars at ${price:.0f}/MTok": "按 ${price:.0f}/MTok 计的美元",
    "student validation loss (nats/byte)": "学生的验证损失（nat/字节）",
    "teacher tokens": "教师 token",
    "epochs": "轮数",
    "text": "文本",
    "top-5": "top-5",
    "full logits": "完整 logits",
    "corpus": "语料",
    "gap closed by top-5": "top-5 弥合的差距",
    "by full logits": "完整 logits 弥合的差距",
    "teacher": "教师",
    "optimiser step": "优化器步数",
    "inside the smallest purchase: {n:,} teacher bytes read {epochs:.0f} times": "最小的一次购买：{n:,} 个教师字节读了 {epochs:.0f} 遍",
})


def tr(text: str, lang: str = "en", *, context: str = "", **values: object) -> str:
    """``text`` in ``lang``: itself in English, its entry of :data:`ZH` in Chinese; with ``values``
    the text is a ``str.format`` template, filled after translating. A word that reads two ways ("ok":
    a verdict, or how a run ended) takes a ``context``, its key ``context + "\\x04" + text`` (gettext's
    msgctxt). Text with no word of two Latin letters ("N = √(C/120)", "δ/M") is symbols and stays as
    it is. Raises ValueError for an unknown language and for English text with no Chinese entry
    (naming it, so the fix is one line here)."""
    choice("lang", lang, LANGS)
    if lang == "zh":
        key = f"{context}\x04{text}" if context else text
        if key not in ZH and not WORD.search(text):
            return text.format(**values) if values else text     # symbols only: "N = √(C/120)", "D*/N*"
        if key not in ZH:
            raise ValueError(f"no Chinese entry for {text!r}{f' ({context})' if context else ''}: "
                             "add it to course_lib/i18n.py ZH")
        text = ZH[key]
    return text.format(**values) if values else text


def tr_all(texts: list[str] | tuple[str, ...], lang: str = "en") -> list[str]:
    """Each of ``texts`` in ``lang`` (a table's header row)."""
    return [tr(t, lang) for t in texts]
