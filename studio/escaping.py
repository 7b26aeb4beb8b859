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


# Characters that change how a name looks without being seen, besides the format
# characters (category Cf: bidi overrides and isolates, zero-width spaces and joiners, soft
# hyphens, tags): the Hangul fillers, the combining grapheme joiner and the variation
# selectors, each invisible on its own, so that two names look the same.
_INVISIBLE = {0x034F, 0x115F, 0x1160, 0x3164, 0xFFA0, *range(0xFE00, 0xFE10),
              *range(0xE0100, 0xE01F0)}
_JOINERS = {0x200C, 0x200D}  # ZWNJ and ZWJ
_JOINING_SCRIPTS = ("ARABIC", "SYRIAC", "NKO", "MONGOLIAN", "DEVANAGARI", "BENGALI",
                    "GURMUKHI", "GUJARATI", "ORIYA", "TAMIL", "TELUGU", "KANNADA",
                    "MALAYALAM", "SINHALA")
"""Scripts whose words need ZWNJ or ZWJ to be written right (Persian, Hindi, ...)."""


def _script(char: str) -> str | None:
    """The joining script a letter or mark belongs to (by its Unicode name), else None."""
    if not unicodedata.category(char).startswith(("L", "M")):
        return None
    name = unicodedata.name(char, "")
    return next((script for script in _JOINING_SCRIPTS if name.startswith(script + " ")),
                None)


def _needed_joiner(value: str, index: int) -> bool:
    """Whether the ZWNJ or ZWJ at `index` joins two letters of one script that uses them."""
    if not 0 < index < len(value) - 1:
        return False
    before = _script(value[index - 1])
    return before is not None and before == _script(value[index + 1])


def _invisible(value: str, index: int) -> bool:
    code = ord(value[index])
    if code in _JOINERS:
        return not _needed_joiner(value, index)
    return code in _INVISIBLE or unicodedata.category(value[index]) == "Cf"


def name_problem(value: str, what: str) -> str | None:
    """Why `value` cannot be a name (`what`: "name", "file name"), or None: a control
    character or line separator (they cut names in files and logs, break listings) or an
    invisible formatting character (it makes a name look like another); a ZWNJ or ZWJ
    between two letters of a script that needs them is written, not hidden."""
    for index, char in enumerate(value):
        if unicodedata.category(char) in ("Cc", "Zl", "Zp"):
            return (f"the {what} holds a control character (U+{ord(char):04X} at character "
                    f"{index + 1}); use printable characters only")
        if _invisible(value, index):
            return (f"the {what} holds an invisible formatting character (U+{ord(char):04X} "
                    f"at character {index + 1}) that can make it look like another; "
                    "remove it")
    return None
