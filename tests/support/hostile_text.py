"""Text that would run script or become markup if a page rendered it as HTML or Markdown:
what the escaping tests store as questions, model output and names."""

from __future__ import annotations

FLAG = "__ran"
"""The window property the handlers in `HOSTILE` would set, had they run."""
HOSTILE = (f"<img src=x onerror=window.{FLAG}=1><svg onload=window.{FLAG}=2>"
           f"<a href=javascript:window.{FLAG}=3>x</a> <b>bold</b> *em* $$x$$")
"""At most 128 characters: a run's name may hold it."""
MARKUP = "img, svg[onload], a, b, em, script, .katex"
"""What the hostile text would turn into where it were rendered (none of it may appear)."""

# What the hostile text would have become had it been rendered: its own elements, a link, a
# formula. (Text of `<b>`, `<em>`: the page's own bold and emphasis are other words.)
HOSTILE_MARKUP = """() => [...document.querySelectorAll(
    'img[src="x"], [onerror], [onload], a[href^="javascript"], .katex, b, em')]
    .filter(e => e.tagName === 'IMG' || e.hasAttribute('onerror') || e.hasAttribute('onload')
        || e.tagName === 'A' || e.classList.contains('katex')
        || ['bold', 'em'].includes(e.textContent)).map(e => e.outerHTML.slice(0, 120))"""
"""A page script listing what of `HOSTILE` was rendered as markup (empty: nothing)."""
