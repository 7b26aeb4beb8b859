"""Write the math demo pack (studio/demo/math/): invented word problems for the python tool.

Every question is drawn from a template with a fixed seed, so running this again writes the
same files; the answer is computed here with exact decimal arithmetic and stored with the
numbers it came from (``kind`` and ``values``), so tests/services/test_demo_pack.py can redo
the arithmetic its own way. The exemplars' ``<output>`` blocks are what their code prints,
run here with this Python (the studio's sandbox prints the same: the test runs them there
too).

    python scripts/math_pack.py           # rewrite studio/demo/math/qa.jsonl, exemplars.jsonl
    python scripts/math_pack.py --check   # exit 1 if either file differs from what it writes
"""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal
from pathlib import Path

from studio import demo
from studio.method.tools import PythonTool

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pack_files import answer_text, draw_rows, jsonl, write_or_check  # noqa: E402

SEED = 18
PER_KIND = 20  # questions drawn per template
HELDOUT = 60  # of them held out, spread over the templates

NAMES = ("Asha", "Bram", "Carmen", "Dario", "Elin", "Farid", "Greta", "Hugo", "Ines", "Jonas",
         "Kemi", "Lior", "Mara", "Nils", "Oona", "Pavel", "Quinn", "Rosa", "Sami", "Tove")
GOODS = (("jar of honey", "jars of honey"), ("notebook", "notebooks"),
         ("bag of rice", "bags of rice"), ("candle", "candles"), ("tin of paint", "tins of paint"),
         ("loaf of rye bread", "loaves of rye bread"), ("ball of wool", "balls of wool"),
         ("box of tea", "boxes of tea"), ("pack of seeds", "packs of seeds"),
         ("bottle of ink", "bottles of ink"))
THINGS = ("lamp", "bicycle", "kettle", "jacket", "desk chair", "pair of boots", "tent", "guitar")
TOWNS = ("Harlow Cross", "Milbury", "Østvik", "Penrith Vale", "Quarry End", "Redmoor")
BAKES = (("loaves", "cakes", "pies"), ("muffins", "tarts", "scones"),
         ("bagels", "pretzels", "buns"))

CENT = Decimal("0.01")


def money(value: Decimal) -> str:
    """Dollars with cents, as a question writes a price ("27.00", "4.75")."""
    return str(value.quantize(CENT))


@dataclass(frozen=True)
class Problem:
    kind: str
    question: str
    values: dict
    answer: Decimal


def unit_price(rng: random.Random) -> Problem:
    n, m = rng.sample(range(2, 25), 2)
    cents = rng.randrange(45, 900, 5)
    one, many = rng.choice(GOODS)
    total = Decimal(cents * n) / 100
    return Problem("unit_price", f"At a market, {n} {many} cost ${money(total)}. At the same "
                   f"price per {one.split(' of ')[0]}, how much do {m} {many} cost, in dollars?",
                   {"count": n, "total": money(total), "asked": m},
                   total / n * m)


def discount_tax(rng: random.Random) -> Problem:
    price = rng.randrange(20, 400)
    off, tax = rng.choice((10, 15, 20, 25, 30, 40)), rng.choice((5, 6, 8, 10, 12, 20))
    thing = rng.choice(THINGS)
    final = (Decimal(price) * (100 - off) / 100 * (100 + tax) / 100).quantize(CENT, ROUND_HALF_UP)
    return Problem("discount_tax", f"A {thing} is priced at ${price}. It is sold at {off}% off, "
                   f"and then a sales tax of {tax}% is added to the reduced price. What does the "
                   f"buyer pay, in dollars, rounded to the nearest cent?",
                   {"price": price, "discount_percent": off, "tax_percent": tax}, final)


def two_leg_distance(rng: random.Random) -> Problem:
    v1, hours = rng.randrange(40, 121, 5), rng.randint(2, 6)
    v2, minutes = 12 * rng.randint(3, 9), rng.randrange(15, 60, 5)
    name = rng.choice(NAMES)
    return Problem("two_leg_distance", f"{name} drives at {v1} km per hour for {hours} hours, "
                   f"then at {v2} km per hour for {minutes} minutes. How many kilometres does "
                   f"{name} drive in all?",
                   {"speed1": v1, "hours": hours, "speed2": v2, "minutes": minutes},
                   Decimal(v1 * hours) + Decimal(v2) * minutes / 60)


FILL_PAIRS = [(a, b) for a in range(2, 16) for b in range(a + 1, 16) if 60 * a * b % (a + b) == 0]


def fill_time(rng: random.Random) -> Problem:
    a, b = rng.choice(FILL_PAIRS)
    return Problem("fill_time", f"Pipe A alone fills a water tank in {a} hours; pipe B alone "
                   f"fills it in {b} hours. With both pipes open, how many minutes does it take "
                   f"to fill the empty tank?",
                   {"hours_a": a, "hours_b": b},
                   Decimal(60 * a * b) / (a + b))


def ages(rng: random.Random) -> Problem:
    young, gap, later = rng.randint(4, 40), rng.randint(2, 30), rng.randint(2, 15)
    old_name, young_name = rng.sample(NAMES, 2)
    total = (young + later) + (young + gap + later)
    return Problem("ages", f"{old_name} is {gap} years older than {young_name}. In {later} "
                   f"years, the sum of their ages will be {total}. How old is {young_name} now?",
                   {"gap": gap, "years_later": later, "sum_later": total},
                   Decimal(young))


def sum_of_products(rng: random.Random) -> Problem:
    kinds = rng.choice(BAKES)
    counts = [rng.randint(3, 60) for _ in kinds]
    prices = [Decimal(rng.randrange(100, 1200, 25)) / 100 for _ in kinds]
    name = rng.choice(NAMES)
    sold = ", ".join(f"{c} {k} at ${money(p)} each" for c, k, p in zip(counts, kinds, prices,
                                                                        strict=True))
    return Problem("sum_of_products", f"On Saturday {name}'s bakery sold {sold}. How much money "
                   f"did the bakery take in, in dollars?",
                   {"counts": counts, "prices": [money(p) for p in prices]},
                   sum((c * p for c, p in zip(counts, prices, strict=True)), Decimal(0)))


def population(rng: random.Random) -> Problem:
    start, grow, fall = rng.randrange(2000, 90000, 50), rng.randint(2, 25), rng.randint(2, 15)
    town = rng.choice(TOWNS)
    after = (Decimal(start) * (100 + grow) / 100 * (100 - fall) / 100).quantize(
        Decimal(1), ROUND_HALF_UP)
    return Problem("population", f"{town} had {start:,} residents. The next year its population "
                   f"grew by {grow}%, and the year after it fell by {fall}%. How many residents "
                   f"did it have then, rounded to the nearest whole number?",
                   {"start": start, "grow_percent": grow, "fall_percent": fall}, after)


def average_needed(rng: random.Random) -> Problem:
    while True:
        scores = [rng.randint(55, 98) for _ in range(4)]
        target = rng.randint(70, 92)
        needed = 5 * target - sum(scores)
        if 0 <= needed <= 100:
            break
    name = rng.choice(NAMES)
    return Problem("average_needed", f"{name} scored {', '.join(map(str, scores[:3]))} and "
                   f"{scores[3]} on four tests. What score does {name} need on the fifth test "
                   f"for the five tests to average exactly {target}?",
                   {"scores": scores, "target": target}, Decimal(needed))


def paint_mix(rng: random.Random) -> Problem:
    red, white = rng.sample(range(1, 10), 2)
    litres = red * rng.randint(2, 12)
    return Problem("paint_mix", f"A shade of pink is mixed from red and white paint in the ratio "
                   f"{red}:{white}. A painter has {litres} litres of red paint and uses all of "
                   f"it. How many litres of pink paint does the painter make?",
                   {"red": red, "white": white, "red_litres": litres},
                   Decimal(litres) * (red + white) / red)


def compound_interest(rng: random.Random) -> Problem:
    principal, rate, years = rng.randrange(500, 10001, 100), rng.randint(2, 9), rng.randint(2, 6)
    value = (Decimal(principal) * (1 + Decimal(rate) / 100) ** years).quantize(CENT,
                                                                               ROUND_HALF_UP)
    return Problem("compound_interest", f"${principal:,} is saved at {rate}% interest per year, "
                   f"compounded once a year. How many dollars are in the account after {years} "
                   f"years, rounded to the nearest cent?",
                   {"principal": principal, "rate_percent": rate, "years": years}, value)


def bags_needed(rng: random.Random) -> Problem:
    while True:
        grams, batches, kilos = rng.randrange(150, 951, 50), rng.randint(3, 40), rng.choice(
            (1, 2, 5))
        if grams * batches % (1000 * kilos):
            break
    name = rng.choice(NAMES)
    bags = (Decimal(grams * batches) / (1000 * kilos)).to_integral_value(ROUND_CEILING)
    return Problem("bags_needed", f"One batch of {name}'s bread needs {grams} grams of flour. "
                   f"Flour is sold only in {kilos}-kilogram bags. How many bags must {name} buy "
                   f"to bake {batches} batches?",
                   {"grams_per_batch": grams, "batches": batches, "kilograms_per_bag": kilos},
                   bags)


def average_speed(rng: random.Random) -> Problem:
    d1, d2 = rng.randrange(20, 301, 10), rng.randrange(20, 301, 10)
    v1, v2 = rng.sample(range(30, 121, 10), 2)
    speed = (Decimal((d1 + d2) * v1 * v2) / (d1 * v2 + d2 * v1)).quantize(Decimal("0.1"),
                                                                          ROUND_HALF_UP)
    return Problem("average_speed", f"A traveller rides the first {d1} km of a trip at an average "
                   f"of {v1} km per hour, then the next {d2} km at {v2} km per hour. What is the "
                   f"average speed over the whole trip, in km per hour, rounded to one decimal "
                   f"place?", {"distance1": d1, "speed1": v1, "distance2": d2, "speed2": v2},
                   speed)


def overtime_pay(rng: random.Random) -> Problem:
    wage, hours = Decimal(rng.randrange(1200, 4001, 50)) / 100, rng.randint(41, 58)
    name = rng.choice(NAMES)
    return Problem("overtime_pay", f"{name} earns ${money(wage)} an hour for the first 40 hours "
                   f"of a week and one and a half times that rate for every hour after 40. "
                   f"{name} worked {hours} hours this week. How much did {name} earn, in "
                   f"dollars?", {"wage": money(wage), "hours": hours},
                   wage * 40 + wage * Decimal("1.5") * (hours - 40))


TEMPLATES: tuple[Callable[[random.Random], Problem], ...] = (
    unit_price, discount_tax, two_leg_distance, fill_time, ages, sum_of_products, population,
    average_needed, paint_mix, compound_interest, bags_needed, average_speed, overtime_pay)


def questions() -> list[dict]:
    """PER_KIND distinct questions per template; HELDOUT of them held out."""
    return draw_rows(TEMPLATES, SEED, PER_KIND, HELDOUT, "math-q", lambda p: {
        "question": p.question, "golden_answers": [answer_text(p.answer)], "kind": p.kind,
        "values": p.values})


EXEMPLARS = [
    {
        "question": "A box of 8 pencils costs $3.60. A class needs 150 pencils and can only buy "
                    "whole boxes. How much does the class spend, in dollars?",
        "steps": [
            ("I need the number of boxes for 150 pencils, rounded up because only whole boxes "
             "are sold, then the cost of those boxes. I will compute it.",
             "import math\nboxes = math.ceil(150 / 8)\nprint(boxes, round(boxes * 3.60, 2))"),
        ],
        "final": "19 boxes are needed (18 boxes hold only 144 pencils), and 19 boxes cost "
                 "$68.40.",
        "answer": "68.40",
    },
    {
        "question": "Lena is 4 times as old as her son. In 6 years she will be 3 times as old as "
                    "he will be then. How old is Lena now?",
        "steps": [
            ("Let the son be s years old. Then 4s + 6 = 3(s + 6), so s = 12 and Lena is 48. "
             "I will check it by trying every age.",
             "for s in range(1, 60):\n    if 4 * s + 6 == 3 * (s + 6):\n"
             "        print('son', s, 'Lena', 4 * s)"),
        ],
        "final": "Only s = 12 works, so Lena is 48.",
        "answer": "48",
    },
    {
        "question": "A shop buys 240 mugs at $2.75 each and sells 85% of them at $6.00 each. "
                    "What is its profit, in dollars?",
        "steps": [
            ("Profit is the money from the mugs sold minus the cost of all mugs. First the "
             "number sold.",
             "sold = 240 * 85 / 100\nprint(sold)"),
            ("204 mugs are sold. Now the takings minus the cost.",
             "print(round(204 * 6.00 - 240 * 2.75, 2))"),
        ],
        "final": "The shop takes in $1,224.00 and paid $660.00, a profit of $564.",
        "answer": "564",
    },
]


@dataclass(frozen=True)
class PrintedRun:
    """What the python tool reads of a run (studio.method.tools.CodeRun)."""

    stdout: str
    stderr: str = ""
    error: str | None = None


def run_code(code: str) -> PrintedRun:
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                          timeout=30, check=True)
    return PrintedRun(done.stdout, done.stderr)


def exemplars(run: Callable[[str], PrintedRun] = run_code) -> list[dict]:
    """The worked traces: think, code, the output the environment inserts, ..., answer."""
    tool = PythonTool(lambda snippets: [run(s) for s in snippets])
    out = []
    for ex in EXEMPLARS:
        parts = []
        for think, code in ex["steps"]:
            (result,) = tool.execute([code])
            parts.append(f"<think> {think} </think>\n<code>\n{code}\n</code>"
                         f"{tool.observation(result)}")
        parts.append(f"<think> {ex['final']} </think>\n<answer> {ex['answer']} </answer>")
        out.append({"question": ex["question"], "solution": "".join(parts),
                    "answer": ex["answer"]})
    return out


def main(argv: list[str] | None = None) -> int:
    files = {demo.MATH_QA: jsonl(questions()), demo.MATH_EXEMPLARS: jsonl(exemplars())}
    return write_or_check(__doc__.split("\n")[0], "math_pack.py", files, argv)


if __name__ == "__main__":
    sys.exit(main())
