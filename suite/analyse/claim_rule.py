"""The rule that turns a claim's tests into its verdict, and why, as structured values.

A verdict comes with a `Why`: a `Reason` (what decided it), the figures it was read off, the reason it
qualifies (`under`: a refutation an edge step may explain, a confirmation its top path holds too few
lengths of) and notes beside it. `Why.tells` says what would tell where the verdict is open (more lengths
within the span, longer ones past it, more on the top path). Code decides on these values (the adaptive
lengths of suite.run.settle, the report); the English is rendered from them here alone, in `text`, from
TEMPLATES. The rule's thresholds are docs/CLAIMS.md's, "Verdicts".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

NEED_LEVEL = 0.05
HIGHER_LEVEL = 0.01  # a refutation needs the stronger evidence
MIN_HIGHER_SHARE = 0.05  # of the largest length's time
CONFIRM_DOF = 3  # degrees of freedom a confirmation leaves to the higher term's test (F(1, 1) at 1% is 4052)
# A higher term's test within this factor of its level, either side, with a share that would matter: the next
# length may turn the verdict, so its series climbs on (suite.run.settle)
MARGIN = 5.0
DOMINANT = 0.5  # a refutation whose higher term carries this share of the top length's time: longer only adds to it


class Tells(str, Enum):
    """What would tell, where a verdict is open."""

    NOTHING = "nothing"
    MORE_LENGTHS = "more lengths"  # within the span: the model has too few points for its tests
    LONGER_LENGTHS = "longer lengths"  # past the span's top: the claim's term, or a cache's step, shows there
    TOP_PATH_LENGTHS = "top path lengths"  # more lengths on the path the top lengths ran on
    WIDER_SPAN = "wider span"  # the span is too short to fit at all


class Reason(str, Enum):
    """What decided a verdict (the cost model's, the power law's, the counted work's, a ladder's stop)."""

    FEW_LENGTHS = "few_lengths"  # fewer lengths than the cost model takes
    NO_FIT = "no_fit"  # fewer points than the power law takes
    SHORT_SPAN = "short_span"
    PARAMETERS = "parameters"  # no degree of freedom left to any test
    FREEDOM = "freedom"  # the claim's term needed, too few degrees of freedom left to look for a higher one
    HIDDEN = "hidden"  # the claim's term not needed yet: the overheads still hide it
    CONFIRMED = "confirmed"  # the claim's term needed and no higher one
    HIGHER = "higher"  # a higher term needed
    EDGE = "edge"  # a refutation a step at the span's top edge may explain
    EDGE_KEPT = "edge_kept"  # a refutation as much with that step
    SHORT_PATH = "short_path"  # a confirmation whose top path holds too few lengths
    BY_WORK = "by_work"  # the counted FLOPs grow faster than the claim
    BY_BYTES = "by_bytes"  # a decode step's time rises by what reading its cache takes, its claim's bytes do not
    BYTES_CACHE = "bytes_cache"  # bytes alone: that rise, where the claim's step reads less than its cache
    BYTES_WITHIN = "bytes_within"  # bytes alone: the time's rise reads less than half the cache beyond the claim's
    BYTES_UNSEEN = "bytes_unseen"  # bytes alone: half the cache would take less than the shortest step itself
    AT_LEVEL = "at_level"  # the higher term's test within MARGIN of its level: the next length may turn it
    CONTESTED = "contested"  # refuted by the higher term, while the power law still reaches the claim
    BELOW = "below"  # memory: the claim's term not needed, no higher one: the call keeps less than its claim allows
    NO_CLAIM = "no_claim"  # the power law's reasons, for an exponent without the cost model
    WIDE = "wide"
    WITHIN = "within"
    OUTSIDE = "outside"
    OVERLAPS = "overlaps"


class Note(str, Enum):
    """What is said beside a verdict's reason without changing it."""

    TOP_PATH_ALONE = "top_path_alone"  # fitted on its top path alone
    NO_PROBE = "no_probe"  # the cache steps stand in for a gather rate no probe measured


TELLS = {
    Reason.FEW_LENGTHS: Tells.MORE_LENGTHS,
    Reason.NO_FIT: Tells.MORE_LENGTHS,
    Reason.SHORT_SPAN: Tells.WIDER_SPAN,
    Reason.PARAMETERS: Tells.MORE_LENGTHS,
    Reason.FREEDOM: Tells.MORE_LENGTHS,
    Reason.HIDDEN: Tells.LONGER_LENGTHS,
    Reason.EDGE: Tells.LONGER_LENGTHS,
    Reason.SHORT_PATH: Tells.TOP_PATH_LENGTHS,
    Reason.AT_LEVEL: Tells.LONGER_LENGTHS,
    Reason.CONTESTED: Tells.LONGER_LENGTHS,
    Reason.BYTES_UNSEEN: Tells.LONGER_LENGTHS,
    Reason.WIDE: Tells.MORE_LENGTHS,
    Reason.OVERLAPS: Tells.LONGER_LENGTHS,
}


@dataclass(frozen=True)
class Why:
    """Why a verdict stands: its reason, the figures read off the measurements, what it qualifies, notes."""

    reason: Reason
    facts: dict = field(default_factory=dict)
    under: Why | None = None
    notes: tuple[tuple[Note, dict], ...] = ()

    @property
    def tells(self) -> Tells:
        return TELLS.get(self.reason, Tells.NOTHING)

    def noted(self, note: Note, **facts) -> Why:
        return Why(self.reason, self.facts, self.under, (*self.notes, (note, facts)))

    def __str__(self) -> str:
        return text(self)


TEMPLATES = {
    Reason.FEW_LENGTHS: "{lengths} lengths measured, {needed} at least",
    Reason.NO_FIT: "fewer than {needed} points measured",
    Reason.SHORT_SPAN: "span {span:.0f}x{after}, {needed:.0f}x needed",
    Reason.PARAMETERS: "{lengths} lengths for {parameters} parameters: more lengths would tell",
    Reason.FREEDOM: "{lead} is needed (without it p = {need_p:.2g}), but {lengths} lengths leave {dof} "
    "degree{s} of freedom to look for a higher term, {needed} needed: more lengths would tell",
    Reason.HIDDEN: "the overheads still hide {lead} (without it p = {need_p:.2g}): lengths past n = {top:g} would tell",
    Reason.CONFIRMED: "{lead} is needed (without it p = {need_p:.2g}) and no higher term is ({higher}: "
    "p = {higher_p:.2g}, {share:.0%} of the {of} at n = {top:g})",
    Reason.HIGHER: "a term {higher} above the claim's {lead} is needed (F test p = {higher_p:.2g}): {share:.0%} "
    "of the {of} at n = {top:g}",
    Reason.EDGE: "{under}, unless the working set's nearing {level} (from n ≈ {n_edge:.0f}) is a step: lengths "
    "to {until:.0f} would tell",
    Reason.EDGE_KEPT: "{under}; as much with a step where the working set nears {level}",
    Reason.SHORT_PATH: "{under}, but the top lengths' path ({path}, only at n = {at}) holds fewer than {needed} "
    "lengths, fitted almost freely: more lengths on it would tell",
    Reason.BY_WORK: "its counted FLOPs grow as {n}^{counted}, above the claim's {n}^{claimed:g}; time: {under}",
    Reason.BY_BYTES: "its time rises from n = {low:g} to {top:g} by what reading {read_mb:.3g} MB takes at the memory "
    "bandwidth ({gbps:.3g} GB/s), {share:.0%} of its cache's K and V ({cache_mb:.3g} MB), where its "
    "claim's step reads {claim_kb:.3g} kB; time: {under}",
    Reason.BYTES_CACHE: "its time rises from n = {low:g} to {top:g} by what reading {read_mb:.3g} MB takes at the "
    "memory "
    "bandwidth ({gbps:.3g} GB/s), {share:.0%} of its cache's K and V ({cache_mb:.3g} MB), where its "
    "claim's step reads {claim_kb:.3g} kB",
    Reason.BYTES_WITHIN: "its time rises from n = {low:g} to {top:g} by at most what reading {read_mb:.3g} MB takes at "
    "the memory bandwidth ({gbps:.3g} GB/s): its claim's step reads {claim_kb:.3g} kB, its cache "
    "holds {cache_mb:.3g} MB",
    Reason.BYTES_UNSEEN: "reading half its cache at n = {top:g} would take {unseen_us:.3g} µs at the memory bandwidth, "
    "less than its shortest step ({step_us:.3g} µs): longer lengths would tell",
    Reason.AT_LEVEL: "with its higher term's test at its level ({higher}: p = {higher_p:.2g}, {share:.0%} of the time)",
    Reason.CONTESTED: "by its higher term's test ({higher}: p = {higher_p:.2g}, {share:.0%} of the time) while its "
    "time exponent [{lo:.2f}, {hi:.2f}] reaches the claim's {claimed:g} ± {tolerance:g}",
    Reason.BELOW: "it keeps less than its claim: {lead} is not needed (without it p = {need_p:.2g}), nor is a higher "
    "term ({higher}: p = {higher_p:.2g}, {share:.0%} of the {of} at n = {top:g})",
    Reason.NO_CLAIM: "nothing is claimed for this exponent",
    Reason.WIDE: "[{lo:.2f}, {hi:.2f}] is {width:.2f} wide, {max_width:g} at most",
    Reason.WITHIN: "[{lo:.2f}, {hi:.2f}] within {claimed:g} ± {tolerance:g}",
    Reason.OUTSIDE: "[{lo:.2f}, {hi:.2f}] wholly outside {claimed:g} ± {tolerance:g}",
    Reason.OVERLAPS: "[{lo:.2f}, {hi:.2f}] overlaps the edge of {claimed:g} ± {tolerance:g}",
}
NOTES = {
    Note.TOP_PATH_ALONE: " (on its top path alone, {path}, from n = {first:g})",
    Note.NO_PROBE: "; no gather probe of this run reaches its lengths: the cache steps stand in for the gathers' rate",
}


def text(why: Why) -> str:
    """The English of a verdict's reason: the one place it is written."""
    under = text(why.under) if why.under is not None else ""
    said = TEMPLATES[why.reason].format_map({"of": "time", **why.facts, "under": under})  # of: what the shares are of
    return said + "".join(NOTES[note].format(**facts) for note, facts in why.notes)


def power_name(p: float) -> str:
    return "n^0" if p == 0 else f"n^{p:g}"


def decide(
    claimed: float,
    need_p: float,
    higher_p: float,
    higher: str,
    share: float,
    parameters: int,
    top: float,
    lengths: int,
    of: str = "time",
) -> tuple[str, Why]:
    """The cost model's verdict on the claim's leading term, from its two F tests (docs/CLAIMS.md, "Verdicts"):
    confirmed when the term is needed and no higher one is, with CONFIRM_DOF degrees of freedom left to that test;
    refuted when a higher term is needed and carries MIN_HIGHER_SHARE of the top length's time; else inconclusive.
    `parameters`: the claim's model's; `top`: the largest length; `of`: what is modelled, the shares' whole."""
    lead = power_name(claimed)
    if math.isnan(need_p) or math.isnan(higher_p):
        return "inconclusive", Why(Reason.PARAMETERS, {"lengths": lengths, "parameters": parameters + 1})
    tested = {
        "lead": lead,
        "need_p": need_p,
        "higher": higher,
        "higher_p": higher_p,
        "share": share,
        "top": top,
        "of": of,
    }
    if higher_p < HIGHER_LEVEL and share >= MIN_HIGHER_SHARE:
        return "refuted", Why(Reason.HIGHER, tested)
    dof = lengths - parameters - 1  # left to the test for a higher term
    if need_p < NEED_LEVEL and dof < CONFIRM_DOF:
        return "inconclusive", Why(
            Reason.FREEDOM,
            {**tested, "lengths": lengths, "dof": dof, "s": "s" if dof != 1 else "", "needed": CONFIRM_DOF},
        )
    if need_p < NEED_LEVEL:
        return "confirmed", Why(Reason.CONFIRMED, tested)
    return "inconclusive", Why(Reason.HIDDEN, tested)


def decide_memory(
    claimed: float, need_p: float, higher_p: float, higher: str, share: float, parameters: int, top: float, lengths: int
) -> tuple[str, Why]:
    """The verdict on a claim of extra memory, O(n^claimed): a bound, so a peak that keeps less than the claim's term
    (not needed) with no higher term needed either is confirmed, where the higher term's test keeps CONFIRM_DOF degrees
    of freedom; else `decide`'s rule, whose refutation (a higher term needed, carrying MIN_HIGHER_SHARE of the peak at
    the largest length) is the same as time's (docs/CLAIMS.md, "Memory: what a call keeps")."""
    status, why = decide(claimed, need_p, higher_p, higher, share, parameters, top, lengths, of="peak")
    if why.reason is Reason.HIDDEN and lengths - parameters - 1 >= CONFIRM_DOF:
        return "confirmed", Why(Reason.BELOW, why.facts)
    return status, why


def at_level(verdict: str, higher_p: float, share: float) -> bool:
    """Confirmed or refuted with the higher term's test within MARGIN of its level, for a term that would matter:
    the next length may turn it. Not a refutation whose higher term carries DOMINANT of the time."""
    return (
        verdict != "inconclusive"
        and share >= MIN_HIGHER_SHARE
        and not (verdict == "refuted" and share >= DOMINANT)
        and HIGHER_LEVEL / MARGIN <= higher_p < HIGHER_LEVEL * MARGIN
    )
