"""Text from users or models (questions, passages, model output, names, messages) made inert
where it is shown: in Markdown (the UI's gr.Markdown, the model card), in HTML and in
plotly's labels. Such text is shown as typed; nothing in it becomes an element, a link,
emphasis, a heading, a table cell or a formula.
"""

from __future__ import annotations

import re
import unicodedata

# Entities both HTML and plotly's label markup decode (plotly knows no &quot;).
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&#34;", "'": "&#39;"}
# The other ASCII punctuation marks that can start Markdown syntax, backslash-escaped (as
# CommonMark allows for any): emphasis, links and images, autolinks (':' of a scheme, '.' of
# www., '@' of an address), tables ('|'), code, headings, lists ('-', '+', '1.', '1)'),
# setext underlines, the `$$` of Gradio's formulas. (',', ';', '?', '%', '/', '(' start none.)
_MARKDOWN = {c: "\\" + c for c in "!#$)*+-.:=@[\\]^_`{|}~"}
_HTML_TABLE = str.maketrans(_HTML)
_MARKDOWN_TABLE = str.maketrans({**_HTML, **_MARKDOWN})
_LEADING_SPACE = re.compile(r"^[ \t]+", re.MULTILINE)  # four would start a code block


def html_text(text: object) -> str:
    """`text` as HTML text or an attribute value; also right for plotly's labels and hover
    text, whose markup (<b>, <a href>, <br>) is HTML's."""
    return str(text).translate(_HTML_TABLE)


def markdown_text(text: object) -> str:
    """`text` as Markdown that renders to exactly that text (line breaks kept, each line's
    indent dropped), inside a paragraph, a list item or a table cell."""
    return _LEADING_SPACE.sub("", str(text)).translate(_MARKDOWN_TABLE)


def code_span(text: object) -> str:
    """`text` as inline code (a path, a model reference), on one line; not for table cells
    (GFM splits a cell at '|' even inside code)."""
    text = " ".join(str(text).split())
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


# Characters that change how a name looks without being seen: bidi overrides and isolates
# (a name that reads backwards), zero-width spaces and joiners that make two names look
# the same. ZWNJ and ZWJ (U+200C, U+200D) are kept: Persian words and emoji need them.
_INVISIBLE = {0x061C, 0x180E, 0x200B, 0x200E, 0x200F, *range(0x202A, 0x202F),
              0x2060, *range(0x2066, 0x206A), 0xFEFF}


def name_problem(value: str, what: str) -> str | None:
    """Why `value` cannot be a name (`what`: "name", "file name"), or None: a control
    character or line separator (they cut names in files and logs, break listings) or an
    invisible formatting character (it makes a name look like another)."""
    for position, char in enumerate(value, start=1):
        if unicodedata.category(char) in ("Cc", "Zl", "Zp"):
            return (f"the {what} holds a control character (U+{ord(char):04X} at character "
                    f"{position}); use printable characters only")
        if ord(char) in _INVISIBLE:
            return (f"the {what} holds an invisible formatting character (U+{ord(char):04X} "
                    f"at character {position}) that can make it look like another; remove it")
    return None
