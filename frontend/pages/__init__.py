"""The studio's pages, one module each.

A page module exposes `TITLE` (the tab's label) and `build(settings) -> None`,
which lays the page out inside its `gr.Tab` and wires its events to services
(never to the ORM). `frontend.server.PAGES` lists the modules in tab order;
the tab's id is the module's short name (`"launch"`, `"runs"`), which
`frontend.shared.Shared.tabs` uses to switch pages. What several pages share
(the designed curriculum, the run in focus) is in `frontend.shared.current()`.
"""
