"""JSON a request sends (a body, a form field, a pasted reproduce.json), decoded by the one
decoder the uploads use (`studio.method.json_values`): an integer of more than
`MAX_DIGITS` digits, a NUL character, nesting Python cannot follow or text that is not JSON
is a 422 naming the field, never a 500.
"""

from __future__ import annotations

import json

from studio.method.json_values import UnstorableJson, decode_storable
from studio.services.errors import InvalidInput

TOO_DEEP = "nested too deeply (JSON more than about a thousand levels deep)"


def decode_json_input(text: str | bytes, field: str) -> object:
    """The JSON value `text` holds, else `InvalidInput` saying why, after `field`."""
    try:
        if isinstance(text, bytes):
            text = text.decode(json.detect_encoding(text))
        return decode_storable(text)
    except UnicodeDecodeError:
        raise InvalidInput(f"{field}: not text in UTF-8; send JSON in UTF-8") from None
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{field}: not valid JSON ({exc.msg} at line {exc.lineno} column "
                           f"{exc.colno})") from None
    except UnstorableJson as exc:
        raise InvalidInput(f"{field}: {exc}") from None
    except RecursionError:
        raise InvalidInput(f"{field}: {TOO_DEEP}") from None
