"""Where a sampling stage's random numbers come from, and what an implementation declares about its own.

A record with random numbers (`Stage.randomness`) names the fields that carry them and, for a stage keyed by a
generator, the generator protocol its oracle replays (`Protocol`: generator, key rule, draw schedule, version).
An implementation's declaration says one of:
- `randomness = "inputs"` (a stage whose uniforms are inputs) or the record's protocol, every key equal
  (`{generator, key, schedule, version}`): the replay tier. The record's oracle regenerates the stream and every
  check judges the outputs byte for byte. This is what an implementation that declares nothing is judged by.
- `randomness = "own"`: its random numbers are its own (another generator, another schedule, or the given
  uniforms ignored). The distribution tier judges its outputs (`specverify.runs.distribution`); the other checks
  judge by bytes only what does not depend on the draws: its inputs unchanged, nothing written outside the
  output rows the contract writes, no guard or gap byte touched. It is never reported as reading outside its
  inputs (its outputs change from call to call by design).
A protocol that differs from the record's in any key is refused (a replay of another protocol is another
contract); such an implementation declares "own".
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Mapping

import numpy as np

OWN = "own"
INPUTS = "inputs"
OWN_WORDS = "declared its own"     # in `tier_words` of a target judged by the distribution tier


@dataclass(frozen=True)
class Protocol:
    """A generator protocol a replay regenerates byte for byte."""
    generator: str
    key: str
    schedule: str
    version: str

    def words(self) -> str:
        return (f"generator {self.generator}, key {self.key}, schedule {self.schedule}, version {self.version}")


@dataclass(frozen=True)
class Randomness:
    """A stage's random numbers and its panel adapter for the distribution tier.

    `fields`: the inputs that carry them (the uniforms; or the seed and offset keying `protocol`).
    `protocol`: the generator the record's oracle replays (None: the uniforms are inputs).
    `launch_inputs(launch)`: the stage's example for one launch of a chain panel (`specverify.strategies.panels`).
    `emitted(example, outputs, written)`: (tokens int [N, K+1], -1 past the end; n int [N], the drafts accepted
    before the first rejection) read from the outputs of that launch (`written`: per output, which elements the
    call changed), or a one-line problem naming a malformed row.
    `advanced(example)`: the example of the next call, its generator advanced as the contract documents
    (None: the uniforms are inputs, and the next call is given fresh ones).
    `one_hot`: the sampler takes no draft distribution (target-only): its panels' draft rows are one-hot.
    `flat`: flat outputs laid out request by request (output -> an input whose length is B): under own random
    numbers any slot of a request the contract writes may be written."""
    fields: tuple[str, ...]
    protocol: Protocol | None
    launch_inputs: Callable[[Any], Any]
    emitted: Callable[[Any, dict, dict], tuple[np.ndarray, np.ndarray] | str]
    advanced: Callable[[Any], Any] | None = None
    one_hot: bool = False
    flat: Mapping[str, str] = field(default_factory=dict)

    def replayed(self) -> str:
        """How the record's oracle gets the random numbers, in words."""
        if self.protocol is None:
            return f"the uniforms given in {', '.join(f'`{f}`' for f in self.fields)}"
        return f"{self.protocol.words()} (keyed by {', '.join(f'`{f}`' for f in self.fields)})"


def tier_words(stage) -> str:
    """Which tier judges a target of `stage` and under which declaration, in one line."""
    if stage.randomness is None:
        return ""
    if stage.own_randomness:
        return f"randomness: {OWN_WORDS}: outputs judged by the distribution tier, the rest by bytes"
    return f"randomness: replayed byte for byte from {stage.randomness.replayed()}"


def declared(stage, value: Any, where: str, error: type[Exception]):
    """`stage` as the declaration `randomness = value` judges it (raises `error` with one line when the record
    does not allow it)."""
    prefix = f"{where}: {stage.name}: randomness"
    if stage.randomness is None:
        raise error(f"{prefix}: the stage draws no random numbers (nothing to declare)")
    record = stage.randomness.protocol
    if value == OWN:
        return replace(stage, own_randomness=True)
    if value == INPUTS and record is None:
        return stage
    if isinstance(value, dict) and record is not None:
        names = [f.name for f in fields(Protocol)]
        if set(value) != set(names):
            raise error(f"{prefix}: a protocol names exactly {', '.join(names)} (got {', '.join(sorted(value))})")
        for name in names:
            if value[name] != getattr(record, name):
                raise error(f"{prefix}: {name} {value[name]!r} is not the record's {getattr(record, name)!r} "
                            f"(the record replays {record.words()}; an implementation with other random numbers "
                            f"declares randomness = \"own\")")
        return stage
    allowed = "\"inputs\" or \"own\"" if record is None else \
        "the record's protocol {generator, key, schedule, version} or \"own\""
    raise error(f"{prefix}: must be {allowed}, got {value!r}")
