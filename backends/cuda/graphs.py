"""When to record a kernel sequence as a CUDA graph and replay it (no driver calls here).

A graph fixes its kernels' pointer arguments, so one is recorded per *binding*: the tuple of
the caller's input and output addresses (intermediates live in the executable's own buffers,
the same on every call). A binding is recorded only when it comes back (`repeat` sightings),
so a caller whose addresses never repeat (it keeps every result) pays plain launches, not a
capture per call; a steady loop (`y = f(x)` with PyTorch's caching allocator handing back the
same blocks) replays. At most `max_graphs` are kept (least recently used goes). The first
failed capture turns graphs off for good, with the reason, and every call launches plainly.

`recorder` does the device work: `plain(binding, stream)`, `capture(binding) -> handle`
(raises on failure, leaving nothing captured), `replay(handle, stream)`, `destroy(handle)`.
"""
from __future__ import annotations

import collections

PLAIN, CAPTURE, REPLAY = "plain", "capture", "replay"


class GraphReplay:
    def __init__(self, recorder, enabled: bool = True, max_graphs: int = 8, repeat: int = 2, remember: int = 64):
        self.recorder = recorder
        self.enabled = enabled
        self.max_graphs, self.repeat, self.remember = max_graphs, repeat, remember
        self.off_reason = "" if enabled else "turned off (graphs=False)"
        self.graphs: collections.OrderedDict = collections.OrderedDict()     # binding -> handle
        self.seen: collections.OrderedDict = collections.OrderedDict()       # binding -> sightings
        self.counts = collections.Counter()

    def run(self, binding: tuple, stream: int) -> str:
        """Run the sequence for `binding` on `stream`; returns how (plain, capture or replay)."""
        how = self._choose(binding)
        if how == REPLAY:
            self.recorder.replay(self.graphs[binding], stream)
        elif how == CAPTURE:
            try:
                handle = self.recorder.capture(binding)
            except Exception as e:  # noqa: BLE001 - any capture failure: plain launches from now on
                self.disable(f"capture failed: {type(e).__name__}: {e}")
                how = PLAIN
            else:
                self._keep(binding, handle)
                self.recorder.replay(handle, stream)
        if how == PLAIN:
            self.recorder.plain(binding, stream)
        self.counts[how] += 1
        return how

    def _choose(self, binding: tuple) -> str:
        if self.off_reason:
            return PLAIN
        if binding in self.graphs:
            self.graphs.move_to_end(binding)
            return REPLAY
        n = self.seen.pop(binding, 0) + 1
        self.seen[binding] = n
        while len(self.seen) > self.remember:
            self.seen.popitem(last=False)
        return CAPTURE if n >= self.repeat else PLAIN

    def _keep(self, binding: tuple, handle) -> None:
        self.seen.pop(binding, None)
        self.graphs[binding] = handle
        while len(self.graphs) > self.max_graphs:
            _, old = self.graphs.popitem(last=False)
            self.recorder.destroy(old)
            self.counts["evicted"] += 1

    def disable(self, reason: str) -> None:
        """No more graphs: drop the recorded ones and say why (explain shows it)."""
        self.off_reason = reason
        self.clear()

    def clear(self) -> None:
        for handle in self.graphs.values():
            self.recorder.destroy(handle)
        self.graphs.clear()
        self.seen.clear()

    def describe(self) -> str:
        c = self.counts
        state = f"off: {self.off_reason}" if self.off_reason else f"on ({len(self.graphs)} recorded)"
        return (f"CUDA graphs {state}; calls: {c[REPLAY]} replayed, {c[CAPTURE]} recorded, {c[PLAIN]} plain launches"
                + (f", {c['evicted']} graphs evicted" if c["evicted"] else ""))
