"""Write the arithmetic pack (studio/demo/calc/): questions for the calculator tool.

Every question is drawn from a template with a fixed seed, so running this again writes the
same files. Each row keeps the expression that answers it (``expression``, in the
calculator's own syntax) and the numbers the question states (``values``); the answer is
computed here with integers and exact decimals, and tests/services/test_demo_pack.py checks
it against the calculator's value of the expression. The numbers are sized so that a small
model cannot do the sum in its head (3-digit by 2-digit products, 4-digit sums, exact
quotients of 4- and 5-digit numbers, prices in cents). The exemplars' ``<result>`` blocks are
the calculator tool's own output.

    python scripts/calc_pack.py           # rewrite studio/demo/calc/qa.jsonl, exemplars.jsonl
    python scripts/calc_pack.py --check   # exit 1 if either file differs from what it writes
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from studio import demo
from studio.method.tools import CalculatorTool

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pack_files import answer_text, draw_rows, jsonl, write_or_check  # noqa: E402

SEED = 29
PER_KIND = 32  # questions drawn per template
HELDOUT = 60  # of them held out, spread over the templates

NAMES = ("Asha", "Bram", "Carmen", "Dario", "Elin", "Farid", "Greta", "Hugo", "Ines", "Jonas",
         "Kemi", "Lior", "Mara", "Nils", "Oona", "Pavel", "Quinn", "Rosa", "Sami", "Tove")
CONTAINERS = (("crate", "jars of honey"), ("box", "pencils"), ("sack", "potatoes"),
              ("pallet", "bricks"), ("carton", "eggs"), ("shelf", "books"), ("bus", "passengers"),
              ("roll", "stamps"))
THINGS = ("stamps", "marbles", "shells", "coins", "stickers", "postcards")
GOODS = (("metre of rope", "metres"), ("litre of paint", "litres"), ("kilogram of rice",
         "kilograms"), ("metre of cloth", "metres"), ("litre of oil", "litres"))
EVENTS = ("concert", "museum", "boat trip", "theatre", "football match")


def cents(rng: random.Random, low: int, high: int) -> Decimal:
    """A price from `low` to `high` dollars in steps of 5 cents, never a whole dollar."""
    while True:
        value = rng.randrange(low * 100, high * 100, 5)
        if value % 100:
            return Decimal(value) / 100


@dataclass(frozen=True)
class Problem:
    kind: str
    question: str
    expression: str
    values: dict
    answer: Decimal


def product(rng: random.Random) -> Problem:
    a, b = rng.randint(101, 999), rng.randint(12, 99)
    return Problem("product", f"What is {a} × {b}?", f"{a} * {b}", {"a": a, "b": b},
                   Decimal(a * b))


def sum_difference(rng: random.Random) -> Problem:
    a, b, c = rng.randint(1001, 9999), rng.randint(1001, 9999), rng.randint(101, 999)
    return Problem("sum_difference", f"What is {a} + {b} - {c}?", f"{a} + {b} - {c}",
                   {"a": a, "b": b, "c": c}, Decimal(a + b - c))


def grouped_product(rng: random.Random) -> Problem:
    a, b, c = rng.randint(101, 999), rng.randint(101, 999), rng.randint(12, 99)
    return Problem("grouped_product", f"What is ({a} + {b}) × {c}?", f"({a} + {b}) * {c}",
                   {"a": a, "b": b, "c": c}, Decimal((a + b) * c))


def quotient(rng: random.Random) -> Problem:
    d, q = rng.randint(12, 99), rng.randint(101, 999)
    return Problem("quotient", f"What is {d * q} ÷ {d}?", f"{d * q} / {d}",
                   {"dividend": d * q, "divisor": d}, Decimal(q))


def decimal_product(rng: random.Random) -> Problem:
    x, b = cents(rng, 2, 60), rng.randint(12, 99)
    return Problem("decimal_product", f"What is {x} × {b}?", f"{x} * {b}",
                   {"a": str(x), "b": b}, x * b)


def containers(rng: random.Random) -> Problem:
    (one, things), per, n = rng.choice(CONTAINERS), rng.randint(12, 99), rng.randint(101, 999)
    return Problem("containers", f"A {one} holds {per} {things}. How many {things} are there "
                   f"in {n} of them?", f"{n} * {per}", {"per": per, "count": n},
                   Decimal(per * n))


def sharing(rng: random.Random) -> Problem:
    (one, things), per, boxes = rng.choice(CONTAINERS), rng.randint(12, 99), rng.randint(101, 999)
    name = rng.choice(NAMES)
    return Problem("sharing", f"{name} has {per * boxes} {things} and puts exactly {per} in "
                   f"each {one}. How many {one}s does {name} fill?", f"{per * boxes} / {per}",
                   {"total": per * boxes, "per": per}, Decimal(boxes))


def collection(rng: random.Random) -> Problem:
    a, b, c = rng.randint(1001, 9999), rng.randint(101, 999), rng.randint(101, 999)
    name, things = rng.choice(NAMES), rng.choice(THINGS)
    return Problem("collection", f"{name} had {a} {things}, bought {b} more and then gave "
                   f"away {c}. How many {things} does {name} have now?", f"{a} + {b} - {c}",
                   {"had": a, "bought": b, "gave": c}, Decimal(a + b - c))


def tickets(rng: random.Random) -> Problem:
    price, n, fee = rng.randint(12, 99), rng.randint(101, 999), rng.randint(101, 999)
    event = rng.choice(EVENTS)
    return Problem("tickets", f"A {event} ticket costs {price} dollars. A school buys {n} "
                   f"tickets and pays a booking fee of {fee} dollars. How many dollars does the "
                   f"school pay in all?", f"{n} * {price} + {fee}",
                   {"price": price, "tickets": n, "fee": fee}, Decimal(n * price + fee))


def unit_cost(rng: random.Random) -> Problem:
    (one, many), price, n = rng.choice(GOODS), cents(rng, 2, 60), rng.randint(12, 99)
    return Problem("unit_cost", f"A {one} costs {price} dollars. How many dollars do {n} "
                   f"{many} cost?", f"{n} * {price}", {"price": str(price), "count": n},
                   price * n)


TEMPLATES: tuple[Callable[[random.Random], Problem], ...] = (
    product, sum_difference, grouped_product, quotient, decimal_product, containers, sharing,
    collection, tickets, unit_cost)


def questions() -> list[dict]:
    """PER_KIND distinct questions per template, none an exemplar's; HELDOUT held out."""
    return draw_rows(TEMPLATES, SEED, PER_KIND, HELDOUT, "calc-q", lambda p: {
        "question": p.question, "golden_answers": [answer_text(p.answer)], "kind": p.kind,
        "expression": p.expression, "values": p.values},
        taken=[ex["question"] for ex in EXEMPLARS])


EXEMPLARS = [
    {"question": "What is (318 + 947) × 26?", "think": "I need (318 + 947) × 26.",
     "expression": "(318 + 947) * 26"},
    {"question": "A club buys 265 tickets at 43 dollars each and pays a booking fee of 180 "
                 "dollars. How many dollars does the club pay in all?",
     "think": "I need 265 tickets at 43 dollars, plus the fee of 180 dollars.",
     "expression": "265 * 43 + 180"},
    {"question": "A metre of wire costs 3.85 dollars. How many dollars do 74 metres cost?",
     "think": "I need 74 metres at 3.85 dollars each.", "expression": "74 * 3.85"},
]


def exemplars() -> list[dict]:
    """The worked traces: a think line naming the sum, the call, the calculator's own result
    block, the answer."""
    tool = CalculatorTool()
    out = []
    for ex in EXEMPLARS:
        (result,) = tool.execute([ex["expression"]])
        solution = (f"<think> {ex['think']} I will compute it with the calculator. </think>\n"
                    f"<calc> {ex['expression']} </calc>{tool.observation(result)}"
                    f"<answer> {result.value} </answer>")
        out.append({"question": ex["question"], "solution": solution, "answer": result.value})
    return out


def main(argv: list[str] | None = None) -> int:
    files = {demo.CALC_QA: jsonl(questions()), demo.CALC_EXEMPLARS: jsonl(exemplars())}
    return write_or_check(__doc__.split("\n")[0], "calc_pack.py", files, argv)


if __name__ == "__main__":
    sys.exit(main())
