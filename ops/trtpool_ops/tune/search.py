"""The search: what is known about the knobs decides which points are worth a measurement.

Stage 1, modes and contexts: every mode starts at the fewest contexts; at each
next context count only the modes still in play are measured. A mode stops at
its knee (its throughput rose by no more than the noise over its best so far:
more contexts beyond that point are dominated) and is dropped once it has lost
at two context counts (more than the noise below the best mode at that count).
A point that fails (does not load, perf_analyzer fails) stops its mode too.

Stage 2, the further axes, one after another around the best point so far:
a numeric axis (queue delay, max_batch_size, thread counts) steps from its
starting value to its neighbours while each step gains more than the noise, up
first and down only if up did not gain; any other axis tries each value once.
A value is taken only when it gains more than the noise.

Stage 3, the elastic range: where the best point is pipelined or decoupled with
more than one context, the same point with an elastic pool of 1 up to its
contexts (min_contexts, max_contexts) is measured once. The objective takes it in
the fixed pool's place when it serves within the noise of it (Objective.choose).
"""

from __future__ import annotations

from collections.abc import Callable

from trtpool_ops.tune.measurement import Measurement
from trtpool_ops.tune.objective import Objective
from trtpool_ops.tune.space import ELASTIC_MIN, Axis, Candidate, Space, elastic_twin


class Search:
    def __init__(
        self,
        space: Space,
        measure: Callable[[Candidate], Measurement],
        objective: Objective,
        noise: float = 0.05,
        elastic: bool = True,
    ) -> None:
        self.space, self.objective, self.noise = space, objective, noise
        self._measure = measure
        self.measured: dict[Candidate, Measurement] = {}
        self._elastic = int(elastic and space.contexts[-1] > ELASTIC_MIN and any(m != "sync" for m in space.modes))
        self._left = len(space.modes) * len(space.contexts) + self._axes_left(0)

    def _axes_left(self, first: int) -> int:
        """The points the further axes from `first` on, and the elastic step, may still take."""
        return sum(len(a.values) - 1 for a in self.space.axes[first:]) + self._elastic

    def left(self) -> int:
        """At most this many points remain: stage 1's modes still in play, each axis's other values, the
        elastic step."""
        return self._left

    def score(self, candidate: Candidate) -> float | None:
        if candidate not in self.measured:
            self.measured[candidate] = self._measure(candidate)
            self._left = max(0, self._left - 1)
        return self.objective.score(self.measured[candidate])

    def gains(self, score: float | None, over: float | None) -> bool:
        return score is not None and (over is None or score > over * (1 + self.noise))

    def run(self) -> list[Measurement]:
        best = self.modes_and_contexts()
        if best is not None:
            for index, axis in enumerate(self.space.axes):
                self._left = self._axes_left(index)
                best = self.climb(axis, best)
            self.elastic_range(best)
        self._left = 0
        return list(self.measured.values())

    def modes_and_contexts(self) -> Candidate | None:
        playing = list(self.space.modes)
        best_of: dict[str, float] = {}
        losses = dict.fromkeys(playing, 0)
        for step, contexts in enumerate(self.space.contexts):
            scores = {mode: self.score(self.space.at(mode, contexts)) for mode in playing}
            top = max((s for s in scores.values() if s is not None), default=None)
            for mode, score in scores.items():
                if score is None or top is None or score < top * (1 - self.noise):
                    losses[mode] += 1
                knee = not self.gains(score, best_of.get(mode))
                if score is not None:
                    best_of[mode] = max(score, best_of.get(mode, score))
                if knee or losses[mode] >= 2:
                    playing.remove(mode)
            later = len(self.space.contexts) - step - 1
            self._left = len(playing) * later + self._axes_left(0)
        return self.best()

    def best(self) -> Candidate | None:
        scored = [(s, c) for c in self.measured if (s := self.objective.score(self.measured[c])) is not None]
        return max(scored)[1] if scored else None

    def climb(self, axis: Axis, here: Candidate) -> Candidate:
        values = axis.values
        current = values.index(here.setting(axis.name))
        here_score = self.score(here)
        if not axis.ordered:
            for value in values:
                if value != values[current]:
                    there = here.with_setting(axis.name, value)
                    if self.gains(score := self.score(there), here_score):
                        here, here_score = there, score
            return here
        for direction in (1, -1):
            index, moved = current, False
            while 0 <= index + direction < len(values):
                there = here.with_setting(axis.name, values[index + direction])
                if not self.gains(score := self.score(there), here_score):
                    break
                here, here_score, index, moved = there, score, index + direction, True
            if moved:
                break
        return here

    def elastic_range(self, best: Candidate) -> None:
        """Stage 3: the best point with an elastic pool, measured once (where it can differ from it)."""
        twin = elastic_twin(best) if self._elastic else None
        if twin is not None:
            self.score(twin)
