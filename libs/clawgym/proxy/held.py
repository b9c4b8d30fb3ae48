"""This replica's copy of recent generated turns, whole: prompt + output ids under the turn's key.

Owns a byte-bounded LRU that spares a call the O(history) part of splicing. Without it a call
fetches every generated turn of its chain from the live state (each holds only its own segment)
and concatenates them; a harness's next call almost always extends the turn this replica just
generated, whose whole ids it had in hand when it recorded the call. Exact: a turn's key is the
chain hash of its prompt and its own text, so an entry is what `PromptBuilder._rebuild` would
give from the live state (the live state stays the source for calls this replica did not serve).
"""

import threading
from collections import OrderedDict

from clawgym.rendering.splice import HeldTurn


class HeldTurns:
    """(rollout, key) → `HeldTurn`, least recently used dropped past `max_bytes`; thread-safe.

    Per rollout, as the live state's turns are: rollouts of one group may generate the same text
    as different ids, and a call must extend its own rollout's tokens."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._bytes = 0
        self._turns: OrderedDict[tuple[str, bytes], HeldTurn] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._turns)

    def put(self, rollout_id: str, turn: HeldTurn) -> None:
        key, size = (rollout_id, turn.key), turn.ids.nbytes
        if size > self._max_bytes:
            return
        with self._lock:
            old = self._turns.pop(key, None)
            if old is not None:
                self._bytes -= old.ids.nbytes
            self._turns[key] = turn
            self._bytes += size
            while self._bytes > self._max_bytes:
                _, dropped = self._turns.popitem(last=False)
                self._bytes -= dropped.ids.nbytes

    def get(self, rollout_id: str, key: bytes) -> HeldTurn | None:
        with self._lock:
            turn = self._turns.get((rollout_id, key))
            if turn is not None:
                self._turns.move_to_end((rollout_id, key))
            return turn
