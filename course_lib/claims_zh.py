"""The claim ledger in the Chinese edition: each claim quoted from the source notes in their own
words, the "what is true" column in Chinese, and the ledger's pointers moved to the Chinese twins.

The source notes are written in Chinese, so the Chinese pages (book/zh/claims.md, book/zh/notes.md)
quote them instead of translating the English paraphrase back. ``QUOTES`` holds, per claim, the
passages of the note that makes it (``Claim.note``; ``SEED_FILES`` names its file under
``../shared/seeds/``), each an exact substring of that file up to runs of whitespace;
``tests/test_claims.py`` checks every one. ``TRUE_ZH`` is the corrected statement in Chinese, a
template with the same fields as the English one, filled from ``claims.numbers()``: the two editions
print the same computed figures. Verdicts in Chinese are ``claims.VERDICTS_ZH``.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from . import claims

__all__ = ["QUOTES", "REFERENCES_ZH", "SEED_FILES", "TRUE_ZH", "in_toc", "normalise", "quote_md", "render_zh", "twin_pointer"]

# The note each Claim.note refers to: 1 the lecture notes, 2 the tutorial chapter.
SEED_FILES = {1: "000_c85e1e7010ae2b4a.txt", 2: "004_d554ccd813c207df.txt"}

# claim -> the note's own passages (shown joined by an ellipsis). Note 1 writes "$" for dollars;
# note 2 was exported from a page with rendered math, so its "$" delimit TeX (see quote_md).
QUOTES: dict[int, tuple[str, ...]] = {
    1: ("Pretraining FLOPs = 6ND", "2 FLOPs per parameter per token（forward pass：multiply + add）",
        "Backward pass 是 2× forward（计算两个输入矩阵的梯度）"),
    2: ("处理每层前 all-gather 完整参数，处理后丢弃",
        "通信开销：相比 naive DP，用 reduce-scatter 替换 all-reduce 后仅 50% overhead"),
    3: ("若 critical batch size 10M tokens，序列长度 10K，则最多 1K GPU",),
    4: ("HBM 有限（B300 288GB）",),
    5: ("bubbles — batch 开始时最后层 GPU 空闲，batch 结束时第一层 GPU 空闲",),
    6: ("假设 1T tokens 可捕捉前沿模型精华，Opus 4.6 $25/MTok → $25M。微不足道。",),
    7: ("FP16 在对数密度上分布粒度：1-2 之间约 0.001，1024+ 可能差多个整数",
        "1+1+...+1（10,000 次）→ 到 1024 后加 1 可能 round down 到 1024 → 计算值比真实值 10x off"),
    8: ("约每增加 1 个参数配 20 个 token",
        r"$$D\approx 20\mathrm{\Psi }\Rightarrow \text{最优 }\mathrm{\Psi }\approx \sqrt{C/120},"
        r"D\approx \sqrt{20C/6}$$"),
    9: (r"训练 GPT-3 级模型（$N=175\text{B}$、$D=300\text{B}$）约需 $3.1\times {10}^{23}$ FLOP",),
    10: (r"现代预训练用 $10\sim 20\text{T}$ token，原始网页数据在 PB 级",),
    11: ("Llama 3 405B 用了约 38 token/参数（15.6T/405B）",
         "检测到 spike 后回滚到健康 checkpoint 并跳过可疑数据段（Llama 3、MegaScale 均内置）"),
    12: ("BF16 计算天然稳于 FP16（无需 loss scaling）",),
    13: (r"注意力矩阵 $Q{K}^{\mathrm{\top }}$ 与 $\text{softmax}\cdot V$ 各需约 $2Ls$ FLOP/token"
         r"（$L$ 为层数），合计约 $4Ls$",
         r"$s=4096$ 时约 $4\mathrm{\%}$，可忽略；但 $s={10}^5$（超长上下文）时超过 90%"),
    14: ("你有 1024 张 H100（MFU 按 45%），训练一个 34B 模型、8T token 需要多少天？",
         r"$T\approx 3.6\times {10}^6\text{s}\approx 41$ 天"),
    15: ("多训一倍的 token（训练成本 +33%）换取更小的参数量是划算的",),
    16: ("Expert choice：训练中按 experts 相对偏好 split tokens，强制每 expert 获得大致相同数量 → 打破因果性",
         "Token dropping：experts 忽略 rank 不强的 tokens → 后续 token 更强匹配可能导致前面 token 被忽略 → 打破因果性",
         "传言：这解释了 Llama 4 和 Gemini 2 表现不佳"),
    17: ("GPT-4 原始训练的 FP16 bug：", "collectives（如 all-reduce）使用 FP16"),
    18: ("in-flight weight updates —— 新训练步骤完成后立即替换生成模型，使下一训练步骤的短轨迹和大部分长轨迹由最新版本模型生成",),
    19: ("更多加速器在同一个 domain 内 → FSDP 更友好。",),
    20: ("数月连续运行，跨越数千次故障",),
}

# claim -> the corrected statement ("what is true") in Chinese, same fields as Claim.corrected.
TRUE_ZH: dict[int, str] = {
    1: "对矩阵乘法是精确的（PyTorch 的 FLOP 计数器与它分毫不差）；它不含注意力分数，而完整的激活重算会让"
       "硬件做 8ND（这就是 HFU 与 MFU 之别）。",
    2: "FSDP（ZeRO-3）每步传输 3Ψ，是 DP 的 2Ψ 的 1.5 倍；单用 reduce-scatter（ZeRO-1/2）并不多花通信，"
       "多出的那个 Ψ 来自反向时重新收集参数。",
    3: "10⁷/10⁴ = 1000 限制的是数据并行度，而不是 GPU 总数：张量并行和上下文并行分摊的是一条序列的计算，"
       "能在此之上成倍增加 GPU；专家并行和流水线并行不能（专家并行的各 rank，以及流水线的 m ≥ p 个微批次，"
       "用的都是同一个 batch 里的序列）。而且一千万 token 不是常数：临界批大小随损失下降而变大（第 16 章在小 GPT "
       "上用两种方法测了它）；一千万是 Kaplan 等人拟合的 B_crit(L) 在他们的数据上、训练后期给出的值，"
       "远大于训练早期所允许的。",
    4: "每块 GPU 288 GB HBM3e（数据手册）；软件实际可用的容量可能略低。",
    5: "最后一级在开头空闲（结尾也空闲）；第一级要执行一步里最后的反向，所以它在中间空闲，结尾从不空闲。"
       "每一级都空闲 (p−1)(t_f+t_b)：GPipe 和 1F1B 的气泡同为墙钟时间的 (p−1)/(m+p−1)；1F1B 把激活显存的"
       "上限从 m 个微批次降到 p 个。",
    6: "${distill}M 只是输出 token 的标价；Batch API 打五折，降到 ${distill_batch}M；输入 token 另外计费；"
       "而且服务条款禁止用输出训练与之竞争的模型。",
    7: "间隔确实是 2⁻¹⁰，但 FP16 的累加到 2048 为止都是精确的，到 2048 才停住（2048 + 1 恰好落在两个可表示数"
       "的正中间，按舍入到偶数被舍掉）：最终是 {fp16_end}，差了 {fp16_off} 倍。BF16 停在 {bf16_end}（差 "
       "{bf16_off} 倍）。",
    8: "作为经验法则成立。按论文印出的参数化拟合，Gopher 的预算下 N* = {nopt_hoffmann}B；Besiroglu 等人的"
       "重新拟合给出 {nopt_besiroglu}B，与每参数约 20 个 token 相符。",
    9: "6ND = {gpt3} FLOP（论文给出 3.14e23）。",
    10: "对 2024 年成立（Llama 3：15.6T）；2025 年的运行已达 22–40T。Common Crawl 有数 PB。",
    11: "数字没错（每参数 {llama_tpp} 个 token，6ND = {llama_c} FLOP）。但 Llama 3 报告损失尖峰很少、"
        "无需人工干预，MegaScale 自动化的是硬件故障后的恢复；回滚并跳过数据的做法出自 PaLM。",
    12: "BF16 的范围与 FP32 相同，所以不需要损失缩放；但它的精度更低（它停在 {bf16_end}，FP16 停在 "
        "{fp16_end}），所以仍需要 FP32 的主权重和累加器。",
    13: "公式漏了 d：每 token 应为 2·L·s·d（因果）或 4·L·s·d（完整矩阵），即 s=4096 时占 {attn_c}%（因果）"
        "或 {attn_f}%（完整）；到 s ≈ {cross}k 时注意力与稠密部分的计算量相等。",
    14: "按稠密峰值 989 TFLOP/s 算是 {days} 天；误用 1979 这个稀疏算力数字会得出 {days_sparse} 天。完整的规划"
        "（一个放得下的布局，按 Llama 3 的故障率计入故障）还要多出 {days_fail_h} 小时的实际耗时。",
    15: "N 不变时，token 翻倍就是 +100% 的计算量。在损失相同的前提下，把模型减半要多花 +{half_hoffmann}%"
        "（Hoffmann 拟合）或 +{half_besiroglu}%（Besiroglu 重新拟合）的计算量。",
    16: "expert 选 token 确实打破因果性（已实测）；丢弃 token 只有在按分数或排名决定优先级时才打破因果性。"
        "关于具体哪家实验室的说法是传言：Llama 4 用的是 token 选 expert 的 top-1 加一个共享专家。",
    17: "没有一手出处；最接近的公开说法是 OpenAI 2025 年谈 GPT-4.5 预训练的视频，讲的是一个取决于数据的 "
        "torch.sum bug。",
    18: "在 128 块 H100 上学习速度约快 2 倍，同时几乎保持 on-policy；但一条长序列混合了多个策略版本，其中大部分"
        " token 出自较旧的版本（实验测了这个滞后）。",
    19: "每块 GPU 的 FSDP 通信量约为 3Ψ，与 n 无关；要紧的是它经过的链路的带宽，所以更大的 NVLink/ICI 域"
        "（NVL72、TPU 切片）能让更多通信走快速链路。",
    20: "数月，没错；数千次故障只会出现在大得多的集群上。按 Llama 3 的故障率（16,384 块 H100 在 54 天里有 419"
        " 次意外中断：每 {l3_job_h} 小时一次，每块 GPU 的平均故障间隔时间为 {l3_gpu_y} 年），一次 90 天的运行"
        "约遇到 {l3_90d} 次；90 天里遇到 2,000 次需要约 {gpus_2000}k 块这样的 GPU。",
}

# A reference that is a named document rather than a bibliography key, as the Chinese pages name it.
REFERENCES_ZH = {
    "NVIDIA B300 documentation": "NVIDIA B300 文档",
    "Anthropic pricing page": "Anthropic 价格页面",
    "NVIDIA H100 datasheet": "NVIDIA H100 数据手册",
    "OpenAI, Pre-Training GPT-4.5 (2025 video)": "OpenAI 的 Pre-Training GPT-4.5 视频（2025 年）",
}


def _claim(number: int) -> claims.Claim:
    for c in claims.CLAIMS:
        if c.number == number:
            return c
    raise ValueError(f"number: no claim {number} in the ledger (1..{len(claims.CLAIMS)})")


def quote_md(number: int) -> str:
    """Claim ``number`` as the note words it, for a Markdown table cell: the passages in quotation
    marks joined by an ellipsis. The lecture notes' "$" are dollars and are escaped; the tutorial's
    "$" delimit TeX, kept as inline math ("$$" becomes "$": a table cell holds no display math)."""
    parts = []
    for text in QUOTES[number]:
        text = text.replace("|", "\\|")
        text = text.replace("$$", "$") if _claim(number).note == 2 else text.replace("$", "\\$")
        parts.append(f"“{text}”")
    return "……".join(parts)


def render_zh(number: int) -> str:
    """The corrected statement of claim ``number`` in Chinese, its numbers from ``claims.numbers()``."""
    _claim(number)
    return TRUE_ZH[number].format(**claims.numbers())


def twin_pointer(pointer: str, root: Path) -> str | None:
    """The Chinese twin of an evidence pointer: ``book/NN.md#sec-x`` -> ``book/zh/NN.md#zh-sec-x``;
    ``notebooks/NN_lab.ipynb#id`` -> ``notebooks/zh/NN_lab.ipynb#id'`` where the twin notebook
    exists and the book builds it (the cell with the same id, else the same code). None where there
    is no twin yet."""
    path, _, anchor = pointer.partition("#")
    p = Path(path)
    if p.suffix == ".md":
        twin = f"{p.parent}/zh/{p.name}#zh-{anchor}"
        return twin if claims.resolve_evidence(twin, root) else None
    twin_path = p.parent / "zh" / p.name
    if not (root / twin_path).is_file() or not (root / p).is_file() or not in_toc(twin_path, root):
        return None
    if claims.resolve_evidence(f"{twin_path}#{anchor}", root):
        return f"{twin_path}#{anchor}"
    cells = json.loads((root / p).read_text(encoding="utf-8"))["cells"]
    source = next(("".join(c["source"]) for c in cells if c.get("id") == anchor), None)
    for cell in json.loads((root / twin_path).read_text(encoding="utf-8"))["cells"]:
        if source is not None and cell.get("cell_type") == "code" and "".join(cell["source"]) == source:
            return f"{twin_path}#{cell['id']}"
    return None


def in_toc(path: Path, root: Path) -> bool:
    """Whether the book builds ``path`` (book/_config.yml builds only the files book/_toc.yml lists):
    a link to a notebook twin that is not built would be a dangling reference."""
    toc = root / "book" / "_toc.yml"
    entry = str(path.with_suffix("")).replace("\\", "/")
    return toc.is_file() and re.search(rf"^\s*-?\s*file:\s*{re.escape(entry)}\s*$", toc.read_text(encoding="utf-8"), re.M) is not None


def normalise(text: str) -> str:
    """Runs of whitespace as one space: how a quote is matched against its note."""
    return re.sub(r"\s+", " ", text).strip()
