"""Chapter 10 (Pipeline RL): the task and its length distribution, the KV-cached decoder against
the full forward pass, the policy-gradient loss, the closed forms against the simulator, the real
actor/learner processes against a single-process reference and against the simulator, and the
question bank (including the swap exercise graded on real processes)."""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.checks import ch10_pipeline_rl as bank
from course_lib.rl import actors, simulate as sim, task

DIST = task.LengthDist.power_law(4, 64, 1.2)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ----------------------------------------------------------------------------- lengths and task
def test_power_law_pmf_and_moments():
    assert math.isclose(sum(DIST.probs), 1.0)
    p = np.asarray(DIST.probs)
    assert (np.diff(p[:-1]) < 0).all()                 # decreasing, the cap collects the tail
    ls = np.asarray(DIST.lengths, float)
    assert math.isclose(DIST.mean(), float((ls * p).sum()))
    assert math.isclose(DIST.moment(2), float((ls * ls * p).sum()))
    assert math.isclose(DIST.expected_max(1), DIST.mean())
    assert task.LengthDist.constant(7).expected_max(50) == 7


def test_expected_max_against_monte_carlo():
    rng = np.random.default_rng(0)
    samples = DIST.sample(16 * 20000, rng).reshape(20000, 16)
    assert samples.min() >= 4 and samples.max() <= 64
    assert math.isclose(samples.mean(), DIST.mean(), rel_tol=0.02)
    assert math.isclose(samples.max(1).mean(), DIST.expected_max(16), rel_tol=0.02)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 200), alpha=st.floats(0.3, 4.0), l_max=st.integers(5, 400))
def test_expected_max_grows_with_batch_and_is_bounded(n, alpha, l_max):
    d = task.LengthDist.power_law(4, l_max, alpha)
    assert d.mean() - 1e-9 <= d.expected_max(n) <= d.expected_max(n + 1) + 1e-9 <= l_max + 1e-9
    u = sim.sync_utilisation(d, n)
    assert 0 < u <= 1 + 1e-12
    assert sim.sync_utilisation(d, n, t_decode=0.01, t_train=1.0) < u


@pytest.mark.parametrize("call, name", [
    (lambda: task.LengthDist.power_law(0, 10, 1.0), "l_min"),
    (lambda: task.LengthDist.power_law(8, 4, 1.0), "l_max"),
    (lambda: task.LengthDist.power_law(4, 10, float("nan")), "alpha"),
    (lambda: task.LengthDist((1, 2), (0.5, 0.6)), "probs"),
    (lambda: task.LengthDist((2, 1), (0.5, 0.5)), "lengths"),
    (lambda: DIST.expected_max(0), "n"),
    (lambda: sim.sync_utilisation(DIST, 0), "slots"),
    (lambda: sim.sync_utilisation(DIST, 8, t_decode=-1.0), "t_decode"),
    (lambda: sim.pipeline_period(DIST, 2, 8, 0, 0.1), "batch"),
    (lambda: sim.expected_lag(DIST, 2, 8, 16, 0.1, t_delay=-1.0), "t_delay"),
    (lambda: sim.simulate("bulk", DIST, 2, 8, 16, 4, 0.1, 0.1), "mode"),
    (lambda: sim.simulate("sync", DIST, 3, 8, 16, 4, 0.1, 0.1), "batch"),
    (lambda: sim.simulate("pipeline", DIST, 2, 8, 16, 4, 0.1, 0.1, max_lag=-1), "max_lag"),
    (lambda: actors.run("bulk"), "mode"),
    (lambda: actors.run("sync", n_actors=2, batch=15), "batch"),
])
def test_bad_inputs_name_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_reward_and_verifier():
    assert task.correct_answer(7, 5) == [8, 9, 0, 1, 2]
    assert task.reward(7, [8, 9, 0, 1, 2]) == 1.0
    assert task.reward(7, [8, 8, 9, 1, 2]) == 0.6          # 7→8 ✓, 8→8 ✗, 8→9 ✓, 9→1 ✗, 1→2 ✓
    assert task.reward(3, []) == 0.0
    tokens = torch.tensor([[7, 8, 9, 0], [1, 3, 4, 4]])
    assert task.step_correct(tokens).tolist() == [[1, 1, 1], [0, 1, 0]]


# ----------------------------------------------------------------------------- the policy maths
def test_kv_cached_decode_matches_full_forward_with_ragged_slots():
    torch.manual_seed(0)
    model = task.make_policy(24, seed=0)
    tokens = torch.randint(0, 10, (3, 25))
    cache = task.new_cache(model, 3)
    offsets = [0, 5, 11]                       # slot s starts its sequence at global step offsets[s]
    got = [[] for _ in range(3)]
    junk = torch.randint(0, 10, (3, 25))       # what the slots decoded before their sequence began
    for g in range(11 + 25):
        pos = torch.tensor([g - o if g >= o else g for o in offsets]).clamp(max=24)
        feed = torch.tensor([tokens[s, g - o] if 0 <= g - o < 25 else junk[s, pos[s]] for s, o in enumerate(offsets)])
        logits = task.decode_step(model, cache, feed, pos)
        for s, o in enumerate(offsets):
            if 0 <= g - o < 25:
                got[s].append(logits[s])
    full = model(tokens)
    for s in range(3):
        torch.testing.assert_close(torch.stack(got[s]), full[s], atol=1e-5, rtol=1e-5)


def test_pg_loss_on_policy_is_reinforce():
    torch.manual_seed(1)
    model = task.make_policy(8, seed=0)
    tokens = torch.randint(0, 10, (4, 9))
    mask = torch.ones(4, 8, dtype=torch.bool)
    mask[0, 5:] = False
    logp = task.sequence_logprobs(model, tokens)
    r = task.step_correct(tokens)
    loss, stats = task.pg_loss(logp, logp.detach(), r, mask)
    assert stats["mean_abs_log_ratio"] == 0 and stats["clipped_fraction"] == 0 and stats["max_ratio"] == 1
    adv = r - (r * mask).sum() / mask.sum()
    expected = -(adv * logp * mask).sum() / mask.sum()
    torch.testing.assert_close(loss, expected)
    # a token the actor found 10x less likely than the learner does gets weight clip=5, not 10
    blogp = logp.detach().clone()
    blogp[1, 2] -= math.log(10.0)
    _, stats = task.pg_loss(logp, blogp, r, mask, clip=5.0)
    assert math.isclose(stats["max_ratio"], 10.0, rel_tol=1e-4)
    assert math.isclose(stats["clipped_fraction"], 1 / int(mask.sum()), rel_tol=1e-6)


# ----------------------------------------------------------------------------- the simulator
def test_simulated_sync_matches_the_closed_form():
    tr = sim.simulate("sync", DIST, 2, 8, 16, 300, t_decode=1e-3, t_train=0.02)
    assert tr.mean_lag() == 0 and (tr.seq_versions == 1).all()
    assert math.isclose(tr.utilisation(), sim.sync_utilisation(DIST, 16, 1e-3, 0.02), rel_tol=0.05)
    assert math.isclose(tr.slot_utilisation(), DIST.mean() / DIST.expected_max(8), rel_tol=0.05)
    flat = sim.simulate("sync", task.LengthDist.constant(10), 2, 8, 16, 5, t_decode=1e-3, t_train=0.0)
    assert math.isclose(flat.utilisation(), 1.0)


def test_simulated_async_is_one_step_stale_and_pipeline_matches_expected_lag():
    a = sim.simulate("async", DIST, 2, 8, 16, 100, t_decode=1e-3, t_train=0.01)
    assert a.lag_tokens[0] > 0 and a.lag_tokens[1] > 50 * a.lag_tokens[0] and len(a.lag_tokens) == 2
    assert (a.seq_versions == 1).all()
    p = sim.simulate("pipeline", DIST, 2, 8, 32, 400, t_decode=1e-3, t_train=0.004, max_lag=None)
    theory = sim.expected_lag(DIST, 2, 8, 32, 1e-3, t_delay=0.004)   # t_train is 4 whole steps
    assert 0.9 * theory < p.mean_lag() < 1.0 * theory
    assert p.utilisation() > 0.95 and (p.seq_versions > 1).mean() > 0.2
    assert math.isclose(p.steps_per_s(), 1 / sim.pipeline_period(DIST, 2, 8, 32, 1e-3, 0.004), rel_tol=0.05)


# ----------------------------------------------------------------------------- real processes
def _reference(steps: int, stale: bool, n_actors: int = 2, slots: int = 4, max_len: int = 16,
               seed: int = 0, lr: float = 3e-3) -> tuple[list[float], float]:
    """Synchronous (or, with ``stale``, one-step-stale asynchronous) RL in one process with the
    same streams, generators and update as the real actors and learner; returns the batch reward
    of every step and a parameter checksum."""
    dist_ = task.LengthDist.power_law(4, max_len, 1.2)
    learner = task.make_policy(max_len, seed=0)
    sampler = task.make_policy(max_len, seed=0)         # the weights the actors generate with
    opt = torch.optim.Adam(learner.parameters(), lr=lr)
    streams = [task.Problems(dist_, task.stream_seed(seed, a)) for a in range(1, n_actors + 1)]
    gens = [torch.Generator().manual_seed(task.stream_seed(seed, a) + 7) for a in range(1, n_actors + 1)]
    caches = [task.new_cache(learner, slots) for _ in range(n_actors)]
    rewards, previous = [], copy.deepcopy(learner.state_dict())
    for _ in range(steps):
        # sync: round k is sampled by version k; async: by version k − 1 (version 0 for k = 0, 1)
        sampler.load_state_dict(previous if stale else learner.state_dict())
        previous = copy.deepcopy(learner.state_dict())
        batch = []                                    # (start, response, logps) in arrival order
        for a in range(n_actors):
            probs = [streams[a].next() for _ in range(slots)]
            toks = torch.zeros(slots, max_len + 1, dtype=torch.long)
            toks[:, 0] = torch.tensor([d for d, _ in probs])
            lens = torch.tensor([L for _, L in probs])
            pos, lp_all = torch.zeros(slots, dtype=torch.long), torch.zeros(slots, max_len)
            done = torch.zeros(slots, dtype=torch.bool)
            while not done.all():
                with torch.no_grad():
                    logits = task.decode_step(sampler, caches[a], toks[torch.arange(slots), pos], pos)
                logp = torch.log_softmax(logits, -1)
                nxt = torch.multinomial(logp.exp(), 1, generator=gens[a])[:, 0]
                busy = torch.nonzero(~done)[:, 0]
                p = pos[busy]
                toks[busy, p + 1] = nxt[busy]
                lp_all[busy, p] = logp[busy, nxt[busy]]
                pos[busy] += 1
                for i in busy[pos[busy] == lens[busy]].tolist():
                    batch.append((toks[i, :lens[i] + 1].clone(), lp_all[i, :lens[i]].clone()))
                    done[i] = True
        T = max(len(t) - 1 for t, _ in batch)
        tokens = torch.zeros(len(batch), T + 1, dtype=torch.long)
        blogp = torch.zeros(len(batch), T)
        lens = torch.tensor([len(t) - 1 for t, _ in batch])
        for j, (t, lp) in enumerate(batch):
            tokens[j, :len(t)], blogp[j, :len(lp)] = t, lp
        mask = torch.arange(T)[None, :] < lens[:, None]
        logp = task.sequence_logprobs(learner, tokens)
        correct = task.step_correct(tokens)
        loss, _ = task.pg_loss(logp, blogp, correct, mask)
        opt.zero_grad()
        loss.backward()
        opt.step()
        rewards.append(float(((correct * mask).sum(1) / lens).mean()))
    return rewards, float(sum(p.detach().double().sum() for p in learner.parameters()))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_real_run_equals_single_process_reference(mode):
    ref_rewards, ref_sum = _reference(5, stale=mode == "async")      # one thread, like the ranks
    lengths = task.LengthDist.power_law(4, 16, 1.2)
    tr = actors.run(mode, n_actors=2, steps=5, slots=4, max_len=16, lengths=lengths, timeout=90)
    assert tr.rewards.tolist() == ref_rewards
    assert tr.stats["param_checksum"] == pytest.approx(ref_sum, abs=1e-9)
    assert (tr.seq_versions == 1).all()
    if mode == "sync":
        assert tr.mean_lag() == 0 and (tr.seq_lag == 0).all()
        assert np.median(tr.stats["mismatch_single"]) < 1e-5    # same weights, same numbers
    else:                                                       # round 0 fresh, then one stale
        assert tr.lag_tokens[0] == tr.seq_lengths[:8].sum() and len(tr.lag_tokens) == 2
    # the simulator draws the same problems: same lags, and for sync (whose actors stop with the
    # learner; async actors generate one more round) the same count-based slot utilisation
    replay = sim.replay(tr, lengths)
    assert replay.lag_tokens.tolist() == tr.lag_tokens.tolist()
    if mode == "sync":
        assert replay.slot_utilisation() == pytest.approx(tr.slot_utilisation(), rel=1e-12)


def test_real_pipeline_run_mixes_versions_in_flight():
    lengths = task.LengthDist.power_law(4, 32, 1.2)
    tr = actors.run("pipeline", n_actors=2, steps=8, slots=4, max_len=32, lengths=lengths, timeout=90)
    assert len(tr.train) == 8 and len(tr.seq_lengths) == 8 * 8
    assert tr.lag_tokens.sum() == tr.seq_lengths.sum()
    assert tr.mean_lag() > 0 and (tr.seq_versions > 1).any()
    assert len(tr.stats["stale_kv"]) > 0 and np.median(tr.stats["stale_kv"]) > 1e-6   # old keys/values
    swaps = tr.stats["swaps"]                 # (picked up, version, published, load seconds)
    assert (swaps[:, 0] >= swaps[:, 2]).all() and set(swaps[:, 1].astype(int)) == set(range(8))


# ----------------------------------------------------------------------------- the question bank
def test_bank_values_follow_the_library():
    refs = {q.qid: q.reference() for q in bank.QUESTIONS if q.is_value}
    rng = np.random.default_rng(1)
    s = bank.LENGTHS.sample(bank.SYNC_BATCH * 40000, rng).reshape(-1, bank.SYNC_BATCH)
    assert math.isclose(refs["sync_util_gen"], s.mean() / s.max(1).mean(), rel_tol=0.02)
    assert refs["sync_util_time"] < refs["sync_util_gen"]
    gen = bank.BATCH * bank.LENGTHS.mean() * bank.T_DECODE / (bank.N_ACTORS * bank.SLOTS)
    assert refs["pipeline_period"] == max(gen, bank.T_TRAIN_CLUSTER)
    assert 0 < refs["lag_inflight"] < 2
    for q in bank.QUESTIONS:
        if q.is_value:
            assert q.grade(q.reference()).correct
            for m in q.mistakes:
                assert not m.matches(q.reference(), q.reference()), (q.qid, m.message)


def _good_swap(model, pending, buf, group):
    import torch
    import torch.distributed as dist
    if not pending.is_completed():
        return pending, None
    pending.wait()
    version = int(buf[0])
    if version == -1:
        return None, -1
    with torch.no_grad():
        i = 2
        for p in model.parameters():
            p.copy_(buf[i:i + p.numel()].view_as(p))
            i += p.numel()
    return dist.broadcast(buf, src=0, group=group, async_op=True), version


def _aliasing_swap(model, pending, buf, group):
    import torch
    import torch.distributed as dist
    if not pending.is_completed():
        return pending, None
    pending.wait()
    version = int(buf[0])
    if version == -1:
        return None, -1
    torch.nn.utils.vector_to_parameters(buf[2:], model.parameters())
    return dist.broadcast(buf, src=0, group=group, async_op=True), version


def test_swap_exercise_is_graded_on_real_processes():
    assert bank.grade_swap(_good_swap) == (1.0, "")
    score, msg = bank.grade_swap(_aliasing_swap)
    assert score == pytest.approx(0.8) and "share memory" in msg
    score, msg = bank.grade_swap(42)
    assert score == 0 and "function itself" in msg


def test_timeline_legend_keys_every_shade_draw_uses():
    import matplotlib
    matplotlib.use("Agg")
    from course_lib import plots
    from course_lib.rl import simulate as sim
    tr = sim.simulate("pipeline", task.LengthDist.power_law(4, 64, 1.2), 2, 4, 8, 20, t_decode=1e-3, t_train=5e-3)
    fig, ax = plots.figure()
    sim.draw(tr, ax)
    labels = [t.get_text() for t in sim.timeline_legend(fig, slots=4).get_texts()]
    assert labels == ["learner: optimizer step", "actor decoding, 4 of 4 slots busy",
                      "actor decoding, 2 of 4 slots busy", "actor decoding, 1 of 4 slots busy",
                      "blank: waiting for weights"]
    import matplotlib.pyplot as plt
    plt.close(fig)
