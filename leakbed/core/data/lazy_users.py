"""Users whose data is made on access, for sources that can regenerate one user alone.

A ClientApp actor needs its own user's examples, yet used to hold the whole population because
the federation was a dict of every user's data; its memory then grew with the number of clients
(issue 14.2). A generated source (``core.data.synthetic``) can rebuild any one user from its
seed, so it hands out a ``LazyUsers``: the order and sizes of all users up front, each user's
data only while it is used (the few most recent are kept, for code that reads x, then y).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping

from leakbed.core.data.corpus import UserData

KEEP = 4  # users kept after access: a read of one user's fields, or its split, hits the cache


class LazyUsers(Mapping[str, UserData]):
    """Users in a fixed order, each made by ``make(user)`` on access; ``sizes`` is known up front so
    that filtering by size never makes a user. ``make`` must be deterministic (and picklable, e.g. a
    ``functools.partial`` of a module-level function)."""

    def __init__(self, sizes: Mapping[str, int], make: Callable[[str], UserData]) -> None:
        self.sizes = dict(sizes)
        self._make = make
        self._recent: OrderedDict[str, UserData] = OrderedDict()

    def __getitem__(self, user: str) -> UserData:
        if user not in self.sizes:
            raise KeyError(user)
        if user in self._recent:
            self._recent.move_to_end(user)
            return self._recent[user]
        data = self._make(user)
        self._recent[user] = data
        while len(self._recent) > KEEP:
            self._recent.popitem(last=False)
        return data

    def __iter__(self) -> Iterator[str]:
        return iter(self.sizes)

    def __len__(self) -> int:
        return len(self.sizes)

    def __contains__(self, user: object) -> bool:
        return user in self.sizes

    def subset(self, users: list[str]) -> LazyUsers:
        """The given users, in the given order, made the same way."""
        return LazyUsers({u: self.sizes[u] for u in users}, self._make)

    def __getstate__(self) -> dict:
        return {"sizes": self.sizes, "make": self._make}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["sizes"], state["make"])  # type: ignore[misc]


def user_sizes(users: Mapping[str, UserData]) -> dict[str, int]:
    """Each user's example count, without making lazy users."""
    return dict(users.sizes) if isinstance(users, LazyUsers) else {u: len(d) for u, d in users.items()}


def subset(users: Mapping[str, UserData], keep: list[str]) -> Mapping[str, UserData]:
    """The users named in ``keep``, in that order, lazy where ``users`` is."""
    return users.subset(keep) if isinstance(users, LazyUsers) else {u: users[u] for u in keep}
