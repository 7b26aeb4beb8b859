"""A test-only fourth tool that asks of the studio what search asks (it reads the corpus, its
call is a verb of its own, it is drafted from passages) under other names and tags: the
studio's checks and words follow a tool's registration, not the name "search".

Unlike the reverse tool it is not registered on import: `registered_lookup` adds it to the
registry for one test (the other tests keep their list of known tools).
"""

from __future__ import annotations

import pytest

from studio.method.tags import ToolSpec
from studio.method.tools import TOOLS, CallVerb, SearchTool

LOOKUP = ToolSpec("lookup", "lookup", "entry")


class LookupTool(SearchTool):
    spec = LOOKUP
    description = "looks a name up in the documents and returns the best entries"
    using = "looking things up"
    verb = CallVerb("look-up", "look-ups", "looked up")


def registered_lookup(monkeypatch: pytest.MonkeyPatch) -> type[LookupTool]:
    """The lookup tool, registered until the test ends."""
    monkeypatch.setitem(TOOLS, LOOKUP.name, LookupTool)
    return LookupTool
