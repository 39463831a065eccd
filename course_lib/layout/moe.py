"""A mixture of experts in the layout planner: experts spread over an EP degree carved from DP.

A mixture-of-experts model gives each token ``top_k`` of ``n_experts`` routed experts (plus
``shared`` experts every token uses) in ``moe_layers`` of its layers. What changes for a layout:

* **Parameters.** 6ND counts the *active* parameters (``n_params`` of the planner: attention,
  shared and k routed experts a token passes through). Memory holds *all* of them: the routed
  experts, ``moe_layers · n_experts · expert_params``, are spread over the ``ep`` ranks of an
  expert-parallel group — E/ep experts each, whole (not split by TP) — and their optimizer states
  sharded by ZeRO over the dp·cp/ep ranks that hold the same experts (the expert-data-parallel
  group). The dense rest is sharded as in a dense model.
* **EP is carved from DP** (GShard, arXiv 2006.16668; DeepSeek-V3, arXiv 2412.19437 §3.2): the ep
  ranks are data-parallel replicas that exchange tokens; each still feeds its own sequences, so
  the batch floor is not lifted.
* **Compute.** Each GPU's routed tokens (k per token of its share) are split over its E/ep local
  experts: many small GEMMs of m = k·t·ep/E rows, each timed by the step model; the busiest GPU
  sets the pace, so routed compute is multiplied by ``imbalance`` (max/mean expert load; 1.0 is
  perfect balance; the default 1.1 is an assumption, no run publishes its figure).
* **The all-to-all.** Dispatch and combine, forward and backward (``comm.ep_bytes_per_layer``)
  per MoE layer and microbatch, over NVLink for the members in the node and the node's NICs for
  the rest; exposed unless ``overlap`` (DeepSeek-V3's DualPipe hides it behind another
  microbatch's compute, §3.2.1), then only what exceeds the layer's compute. With ``max_nodes``
  (node-limited routing, DeepSeek-V3 §2.1.2 and §3.2.2: each token reaches at most M nodes, sent
  once per node over InfiniBand and forwarded over NVLink to its experts there) the bytes on each
  wire are chapter 14's ``comm.ep_node_bytes``. Under ``precision="fp8"`` the dispatch carries
  FP8 values and their 1×128 tile scales (``FP8_DISPATCH_BYTES``) and the combine stays BF16
  (§3.3.3: activations before the MoE up-projection, and the activation gradient before the
  down-projection, quantized to FP8 for the dispatch; "both the forward and backward combine
  components" retained in BF16).
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import comm
from . import stepmodel
from .._validate import positive, positive_int

__all__ = ["MoE", "DEEPSEEK_V3", "DEEPSEEK_V2", "FP8_DISPATCH_BYTES"]

# Bytes per value of an FP8 dispatch: one E4M3 byte and a 4-byte scale per 1×128 tile (DeepSeek-V3
# §3.3.3 quantizes the dispatched activations as it does Linear inputs, tile-wise; its combine stays BF16)
FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128


@dataclass(frozen=True)
class MoE:
    """The expert structure of a model (per MoE layer): see the module docstring."""

    n_experts: int
    top_k: int
    expert_params: float          # parameters of one routed expert (its MLP)
    moe_layers: int
    shared: int = 0               # shared experts every token passes through, each expert_params
    imbalance: float = 1.1        # max / mean expert load (assumed)
    overlap: bool = False         # all-to-all hidden behind compute (DualPipe-style)
    max_nodes: int | None = None  # node-limited routing: a token reaches at most this many nodes

    def checked(self, n_layers: int) -> MoE:
        positive_int("n_experts", self.n_experts)
        positive_int("top_k", self.top_k, maximum=self.n_experts)
        positive("expert_params", self.expert_params)
        positive_int("moe_layers", self.moe_layers, maximum=n_layers)
        positive_int("shared", self.shared, minimum=0)
        if not (isinstance(self.imbalance, (int, float)) and 1.0 <= self.imbalance < float("inf")):
            raise ValueError(f"imbalance is max/mean expert load, at least 1, got {self.imbalance!r}")
        if not isinstance(self.overlap, bool):
            raise ValueError(f"overlap must be True or False, got {self.overlap!r}")
        if self.max_nodes is not None:
            positive_int("max_nodes", self.max_nodes, maximum=self.top_k)
        return self

    def routed_total(self) -> float:
        """Parameters of every routed expert of every MoE layer (held in memory, not all active)."""
        return self.moe_layers * self.n_experts * self.expert_params

    def routed_active(self) -> float:
        """Routed-expert parameters one token uses: k per MoE layer."""
        return self.moe_layers * self.top_k * self.expert_params


# DeepSeek-V3 (arXiv 2412.19437 §4.2): 61 layers, the first 3 dense; 256 routed experts and 1 shared
# of intermediate size 2048 at hidden 7168 (SwiGLU: 3·7168·2048 parameters each), 8 routed per token,
# each token sent to at most 4 nodes (§4.2, node-limited routing of §2.1.2).
DEEPSEEK_V3 = MoE(n_experts=256, top_k=8, expert_params=3 * 7168 * 2048, moe_layers=58, shared=1, overlap=True,
                  max_nodes=4)
# DeepSeek-V2 (arXiv 2405.04434 §3.1): 60 layers, the first dense; 160 routed experts and 2 shared of
# intermediate size 1536 at hidden 5120, 6 routed per token.
DEEPSEEK_V2 = MoE(n_experts=160, top_k=6, expert_params=3 * 5120 * 1536, moe_layers=59, shared=2)


def expert_degrees(moe: MoE, dp: int, pow2) -> list[int]:
    """EP degrees a layout may use: powers of two dividing both the DP degree and the experts."""
    return [e for e in pow2 if e <= dp and dp % e == 0 and moe.n_experts % e == 0]


def routed_seconds(moe: MoE, tokens: float, h: int, ep: int, gpu: str, peak: float, hbm: float,
                   fp8_peak: float = 0.0) -> dict:
    """One MoE layer's routed experts on the busiest GPU for ``tokens`` of its own, forward and
    backward: (E/ep) experts × their GEMMs on m = k·tokens·ep/E rows each, times ``imbalance``;
    the SwiGLU product of the routed tokens over HBM. Also the forward alone (recomputation).
    With ``fp8_peak`` > 0 the expert GEMMs run in FP8 (DeepSeek-V3's, arXiv 2412.19437 §3.3) and
    their input casts are the ``quantize`` part (``stepmodel.linear_seconds``)."""
    local = moe.n_experts // ep
    m = moe.top_k * tokens * ep / moe.n_experts
    ffn = moe.expert_params / (3.0 * h)
    fwd = bwd = q_fwd = q_bwd = 0.0
    for mm, n, k in ((m, 2 * ffn, h), (m, h, ffn)):
        if not fp8_peak:
            fwd += stepmodel.gemm_seconds(mm, n, k, gpu, peak, hbm)
            bwd += stepmodel.gemm_seconds(mm, k, n, gpu, peak, hbm) + stepmodel.gemm_seconds(k, n, mm, gpu, peak, hbm)
            continue
        (g, q), (g1, q1), (g2, q2) = (stepmodel.linear_seconds(*x, gpu, peak, hbm, fp8_peak)
                                      for x in ((mm, n, k), (mm, k, n), (k, n, mm)))
        fwd, bwd, q_fwd, q_bwd = fwd + g, bwd + g1 + g2, q_fwd + q, q_bwd + q1 + q2
    mem_fwd = 2.0 * (moe.top_k * tokens) * 3 * ffn / hbm
    f = moe.imbalance
    out = {"gemm": f * local * (fwd + bwd), "memory": f * 3.0 * mem_fwd, "forward": f * (local * fwd + mem_fwd)}
    if fp8_peak:
        out["quantize"] = f * local * (q_fwd + q_bwd)
        out["forward"] += f * local * q_fwd
    return out


def all_to_all_seconds(moe: MoE, tokens: float, h: int, ep: int, in_node: int, link: float,
                       nic_per_gpu: float, latency: float, dispatch_bytes: float = 2.0,
                       combine_bytes: float = 2.0) -> float:
    """Dispatch + combine, forward and backward, of one MoE layer and microbatch on one GPU, with
    ``in_node`` of the ``ep`` members in each node: chapter 14's ``comm.ep_node_bytes`` split by
    wire (node-limited to ``moe.max_nodes`` nodes when set: one IB copy per node, forwarded over
    NVLink), NVLink bytes over ``link`` and the rest over the GPU's share of the NICs, plus one
    latency per exchange (four). The dispatch pair (forward dispatch, backward's gradient to the
    experts) moves ``dispatch_bytes`` per value, the combine pair ``combine_bytes``. A group that
    does not fill whole nodes is split by member count: ``in_node − 1`` of the ``ep − 1`` others."""
    if ep == 1:
        return 0.0
    t = max(1, round(tokens))
    per_value = (dispatch_bytes + combine_bytes) / 2.0          # two of the four passes each
    if ep % in_node == 0:
        nodes = ep // in_node
        m = None if moe.max_nodes is None or nodes == 1 else min(moe.max_nodes, nodes, moe.top_k)
        inside, across = comm.ep_node_bytes(t, h, moe.top_k, ep, in_node, m, per_value)
    else:
        total = comm.ep_bytes_per_layer(t, h, moe.top_k, ep, bytes_per_value=per_value)
        inside = total * (in_node - 1) / (ep - 1)
        across = total - inside
    return inside / link + across / nic_per_gpu + 4 * latency
