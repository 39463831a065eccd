"""Read a run's flight-recorder dumps and name the rank to look at, and what it was doing instead.

Every rank numbers its own collectives 0, 1, 2, ... (:mod:`course_lib.triage.recorder`). The ranks
left waiting sit in collective ``S``; at ``S`` most ranks called the same op, label, sizes and dtype.
A rank whose dump differs at ``S`` is named with how it differs:

* ``never entered`` — it has no collective ``S`` at all: it is still in a compute span (``stuck in
  compute``), or it finished without calling it;
* ``skipped`` — its collective ``S`` is another call site (label): it went past the peers' collective;
* ``different collective`` — same call site, another op;
* ``mismatched size`` — same op and call site, other sizes or dtype.

A rank with no dump (it died, or was killed before its timeout) is named as such: if every dump
agrees, it is the suspect; otherwise it is listed beside the verdict.
"""
from __future__ import annotations

import collections
import json
from dataclasses import dataclass, field
from pathlib import Path

from course_lib.i18n import tr

from .recorder import dump_path

__all__ = ["DumpError", "Verdict", "analyze", "analyze_dumps", "read_dumps"]


class DumpError(RuntimeError):
    """The dumps cannot be read as a run's flight record (no dump at all, a file that is not one)."""


@dataclass
class Verdict:
    rank: int | None            # the rank to look at first (None: nothing is wrong in the dumps)
    kind: str                   # never entered / stuck in compute / skipped / different collective / ...
    seq: int | None             # the collective the others wait in (their sequence number)
    collective: str             # "all_reduce 'step 3 grads'"
    doing: str                  # what the named rank was doing instead
    missing: list[int] = field(default_factory=list)   # ranks that left no dump
    message: str = ""

    def __str__(self) -> str:
        return self.message


def read_dumps(folder: str | Path, world_size: int) -> tuple[dict[int, dict], list[int]]:
    """Each rank's dump in ``folder`` and the ranks that left none; ``DumpError`` when a file is
    not a dump (naming it) or when there is none at all."""
    folder = Path(folder)
    dumps, missing = {}, []
    for r in range(world_size):
        path = dump_path(folder, r)
        if not path.is_file():
            missing.append(r)
            continue
        try:
            d = json.loads(path.read_text())
            d["entries"], d["rank"]   # noqa: B018 -- the keys every dump has
        except (ValueError, KeyError, TypeError) as e:
            raise DumpError(f"{path} is not a flight-recorder dump ({type(e).__name__}: {e}): it was not written by "
                            f"FlightRecorder.dump, or was damaged after") from None
        dumps[r] = d
    if not dumps:
        raise DumpError(f"no flight-recorder dump in {folder} (expected rank_00000.json ... for {world_size} ranks): "
                        f"no rank reached its dump (the timeout passed before dump_after_s?) or the folder is wrong")
    return dumps, missing


def _sig(e: dict) -> tuple:
    return (e["op"], e["name"], json.dumps(e["sizes"]), e["dtype"])


def _what(e: dict) -> str:
    return f"{e['op']} {e['name']!r}"


def _doing(d: dict, lang: str = "en") -> str:
    cur = d.get("current")
    if cur and cur["kind"] == "compute":    # the reason is the recorder's own line, as it dumped it
        return tr("in compute {name!r} for {secs:.1f} s when it dumped ({reason})", lang, name=cur["name"],
                  secs=d["dumped_at"] - cur["t_started"], reason=d["reason"])
    if cur:
        return tr("waiting in {what} (its seq {seq}, state {state})", lang, what=_what(cur), seq=cur["seq"],
                  state=cur["state"])
    done = [e for e in d["entries"] if e["kind"] == "collective"]
    last = tr("; its last collective was {what} (seq {seq}, {state})", lang, what=_what(done[-1]),
              seq=done[-1]["seq"], state=done[-1]["state"]) if done else ""
    return tr("not in any collective{last}", lang, last=last)


def analyze(folder: str | Path, world_size: int, lang: str = "en") -> Verdict:
    """The verdict of one run's dumps in ``folder`` (``world_size`` ranks); its message in ``lang``."""
    dumps, missing = read_dumps(folder, world_size)
    return analyze_dumps(dumps, missing, lang)


def analyze_dumps(dumps: dict[int, dict], missing: list[int] = (), lang: str = "en") -> Verdict:
    """The verdict of dumps already read (``dumps[rank]``, as :func:`read_dumps` returns them; a
    JSON file's string keys are accepted), ``missing`` the ranks that left none. The message (and
    ``doing``) are written in ``lang`` (course_lib.i18n); ``kind`` and ``collective`` stay keys."""
    dumps, missing = {int(r): d for r, d in dumps.items()}, list(missing)
    if not dumps:
        raise DumpError("no flight-recorder dump given")
    waiting = {r: d["current"] for r, d in dumps.items()
               if d.get("current") and d["current"]["kind"] == "collective"}
    failed = {r: e for r, d in dumps.items() for e in d["entries"] if e.get("state") in ("failed", "mismatch")}
    pending = {**failed, **waiting}
    lost = tr("; rank(s) {ranks} left no dump (died, or killed before their recorder dumped)", lang,
              ranks=", ".join(map(str, missing))) if missing else ""
    unknown = tr("unknown: it left no dump", lang)
    if not pending:
        if missing:
            r = missing[0]
            return Verdict(r, "no dump", None, "", unknown, missing,
                           tr("rank {r} left no dump (it died, or was killed before its recorder dumped) and no "
                              "other rank was waiting in a collective", lang, r=r))
        return Verdict(None, "none", None, "", "", [],
                       tr("no rank was waiting in a collective: the dumps show no hang", lang))
    seq = min(e["seq"] for e in pending.values())
    at = {r: next((e for e in d["entries"] if e["seq"] == seq), None) for r, d in dumps.items()}
    sigs = collections.Counter(_sig(e) for e in at.values() if e is not None)
    ref_sig, n_ref = sigs.most_common(1)[0]
    ref = next(e for e in at.values() if e is not None and _sig(e) == ref_sig)
    coll = _what(ref)
    odd = []
    for r, e in sorted(at.items()):
        d = dumps[r]
        if e is None and d["next_seq"] <= seq:
            cur = d.get("current")
            kind = "stuck in compute" if cur and cur["kind"] == "compute" else "never entered"
            odd.append((r, kind, _doing(d, lang)))
        elif e is None:
            odd.append((r, "ring overwritten", tr("its ring no longer holds seq {seq} (capacity {capacity})", lang,
                                                  seq=seq, capacity=d["capacity"])))
        elif _sig(e) != ref_sig:
            kind = ("skipped" if e["name"] != ref["name"] else
                    "different collective" if e["op"] != ref["op"] else "mismatched size")
            doing = tr("in {what} with sizes {sizes} {dtype} (its seq {seq})", lang, what=_what(e),
                       sizes=e["sizes"], dtype=e["dtype"], seq=seq)
            odd.append((r, kind, doing))
    if not odd:
        if missing:
            r = missing[0]
            return Verdict(r, "no dump", seq, coll, unknown, missing,
                           tr("rank {r} left no dump and every rank that did waits in {coll} (seq {seq}): rank {r} "
                              "never joined it (it died, or was killed before its recorder dumped)", lang,
                              r=r, coll=coll, seq=seq))
        return Verdict(None, "none", seq, coll, "", [],
                       tr("every rank is in {coll} (seq {seq}) with the same sizes: no rank is missing from it", lang,
                          coll=coll, seq=seq))
    r, kind, doing = odd[0]
    others = "".join(tr("; rank {o} too: {kind}, {doing}", lang, o=o, kind=tr(k, lang, context="hang kind"),
                        doing=dd) for o, k, dd in odd[1:])
    head = tr(HEADS.get(kind, "rank {r}: {doing}"), lang, r=r, coll=coll, seq=seq, n_ref=n_ref, doing=doing,
              sizes=at[r]["sizes"] if at[r] else None, ref_sizes=ref["sizes"], ref_dtype=ref["dtype"])
    return Verdict(r, kind, seq, coll, doing, missing, head + others + lost)


# the verdict's first sentence for each kind of odd rank (templates: course_lib.i18n translates them)
HEADS = {
    "never entered": "rank {r} never entered {coll} (seq {seq}), which {n_ref} rank(s) wait in: it was {doing}",
    "stuck in compute": "rank {r} never entered {coll} (seq {seq}), which {n_ref} rank(s) wait in: it was {doing}",
    "skipped": "rank {r} skipped {coll} (seq {seq}), which {n_ref} rank(s) wait in: it went on and is {doing}",
    "different collective": "rank {r} called a different collective at seq {seq}: its peers are in {coll}, "
                            "it is {doing}",
    "mismatched size": "rank {r} called {coll} (seq {seq}) with sizes {sizes} where its peers have {ref_sizes} "
                       "{ref_dtype}",
}
