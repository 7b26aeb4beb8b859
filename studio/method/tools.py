"""Tools the model calls with tags, registered by name: `search` first.

A tool is a class with its tags (`spec`), what it does in a few words (`description`: the
prompt's instruction names it beside the tool's tags, `studio.method.prompt.instruction_for`),
`execute` (a batch of inputs to one result each: the native engine runs a round's calls of
a tool in one batch, the veRL agent loop one at a time) and `observation` (a result as the
text the environment inserts, in the tool's result tag), the words the launch checks, the
warnings and the model card use (`results`, `using`, `card`), the failure labels an
evaluation with it gives a wrong answer (`misses`, `holds_answer`: `studio.method.failures`),
what the studio around it asks of it (`needs_corpus`, `verb`, `drafted_from`: the run config's
checks, the words about a run that uses it, the exemplar drafts), and `for_run` (how it is
built from what a run offers). Register it with `@register_tool`:
the run config accepts its name, both engines drive it through the protocol
(`studio.method.protocol`) as they drive search, and the viewer colours its calls.
Executing is the backend's business (a BM25 index, the studio's /retrieve, a sandbox): a
tool receives it when it is built (`ToolBackends`), so this module does no I/O itself. The
calculator has no backend: its evaluator is pure (`studio.method.arithmetic`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal, Protocol

from .arithmetic import Calculation, calculate
from .tags import (
    CALCULATOR_TOOL,
    DEFAULT_TOOLS,
    PYTHON_TOOL,
    SEARCH_TOOL,
    ToolSpec,
    format_information,
    result_block,
)


@dataclass(frozen=True)
class ToolCard:
    """How a trained model's card (`studio.services.model_card`) tells an application to
    serve the tool: what the model writes in the call tag and what the application does
    before it appends the result tag."""

    writes: str  # "a query", "a Python program"
    runs: str  # the application's part, then "appends <result> with ..." ({top_k}, {wall},
    # {cpu}: the run's passages per search, the sandbox's seconds)
    returns: str
    serves: str  # the stop-string comment's verb phrase: "run the query"
    purpose: str  # the intro's "to answer questions by ..."
    use: str  # the limits' "intended for research and prototypes of ..."
    calls: str  # the limits' "its ... and answers may be poor"
    example: str  # the question of the usage example (for the run's first tool)


@dataclass(frozen=True)
class CallVerb:
    """A tool whose call is a verb of its own ("search"), in the forms the words about a model
    that uses it alone need: "a valid search", "3.1 searches per question", "whether it
    searches", "it searched" (and `Tool.using`: "without searching")."""

    noun: str
    plural: str  # also the verb's: "it searches"
    past: str


@dataclass(frozen=True)
class FailureLabel:
    """One way an evaluated answer went (`studio.method.failures`): the key its question's
    record stores, the title a page shows, and what it means in plain words."""

    key: str
    title: str
    meaning: str


@dataclass(frozen=True)
class ToolMisses:
    """How an evaluation with this tool alone names a wrong answer, in the order
    `studio.method.failures` checks them after `correct` and `format_miss`: answered without
    calling it, every call failed (None for a tool whose calls never fail), no result held a
    gold answer, a result held one and the answer is still wrong."""

    no_call: FailureLabel
    call_failed: FailureLabel | None
    result_miss: FailureLabel
    answer_miss: FailureLabel

    @classmethod
    def generic(cls, using: str, results: str, can_fail: bool) -> ToolMisses:
        """The labels of a tool that names none of its own, and of an evaluation with several
        tools (`using`, `results`: the tools' words, "searching or running Python")."""
        return cls(
            FailureLabel("no_call", "no call",
                         f"the model answered without {using}, and the answer is wrong"),
            FailureLabel("call_failed", "call failed", "every tool call the model made came "
                         "back as an error") if can_fail else None,
            FailureLabel("result_miss", "result miss", f"the model's tool calls worked, but "
                         f"nothing in the {results} it got back holds the gold answer"),
            FailureLabel("reasoning_miss", "reasoning miss", f"the {results} the model got "
                         "back held the gold answer, yet its answer is wrong"))


class Tool(ABC):
    spec: ClassVar[ToolSpec]
    description: ClassVar[str]
    can_fail: ClassVar[bool] = False
    """Whether a result can be a failure (`failed`): evaluation counts tool errors only for
    runs with such a tool."""
    results: ClassVar[str]
    """What its result blocks hold, in words ("search results"): the launch estimate and the
    model card name them."""
    using: ClassVar[str]
    """Using it, in words ("searching"): the warnings of premature termination name it."""
    card: ClassVar[ToolCard]
    misses: ClassVar[ToolMisses | None] = None
    """Its own failure labels (`failure_labels`); None: the generic ones."""
    holds_answer: ClassVar[Literal["contains", "is"]] = "contains"
    """When a result holds a gold answer (the failure labels ask): `contains`, as SubEM finds
    one in a prediction (a passage, a program's output); `is`, as acc matches a prediction (a
    calculator's value), each by the evaluation's answer matching."""
    needs_corpus: ClassVar[bool] = False
    """Whether it reads the run's corpus: a run, an evaluation or a draft with it names one,
    and veRL's launcher checks the studio's /retrieve, which serves it."""
    verb: ClassVar[CallVerb | None] = None
    """Its call as a verb of its own; None: a "call" of "the <name> tool"."""
    drafted_from: ClassVar[Literal["passages", "arithmetic"] | None] = None
    """How the studio drafts exemplars for it (`studio.services.exemplar_drafts`): from the
    passages a search for the question returns, from the arithmetic the question asks for
    (written as `arithmetic_call`), or not at all."""
    arithmetic_call: ClassVar[str] = "{expression}"
    """An arithmetic draft's call for the question's `expression`."""

    @classmethod
    def failure_labels(cls) -> ToolMisses:
        """What an evaluation with this tool alone calls each wrong answer."""
        return cls.misses or ToolMisses.generic(cls.using, cls.results, cls.can_fail)

    @classmethod
    def for_run(cls, backends: ToolBackends) -> Tool:
        """The tool as a run drives it, from what the run offers (`ToolBackends`): a tool
        that needs nothing overrides nothing."""
        return cls()

    @abstractmethod
    def execute(self, inputs: list[str]) -> list[object]:
        """One result per input, in order."""

    @abstractmethod
    def observation(self, result: object) -> str:
        """The whole environment text for a result: blank lines, the result tag around the
        body, and nothing in the body that closes the tag early."""

    def failed(self, result: object) -> bool:
        """Whether a result is a failure (a program that raised, an expression the calculator
        refused: evaluation counts them as tool errors); a search's results never are."""
        return False


TOOLS: dict[str, type[Tool]] = {}
DEFAULT_TOOL_NAMES: tuple[str, ...] = tuple(spec.name for spec in DEFAULT_TOOLS)
"""The tools of a run, an evaluation or a prompt preview that names none."""


def register_tool(cls: type[Tool]) -> type[Tool]:
    """Class decorator: the tool becomes known by `cls.spec.name`."""
    name = cls.spec.name
    if TOOLS.get(name, cls) is not cls:
        raise ValueError(f"tool '{name}' is registered already ({TOOLS[name].__qualname__})")
    if (cls.failure_labels().call_failed is not None) != cls.can_fail:
        raise ValueError(f"tool '{name}': a 'call failed' label exactly when its calls can fail")
    TOOLS[name] = cls
    return cls


Passages = list[tuple[str, str]]
SearchBackend = Callable[[list[str]], list[Passages]]
"""Queries -> for each query its passages as ``(title, text)``, best first."""


@register_tool
class SearchTool(Tool):
    """method.md's tool: a query in `<search>`, the top-k passages in `<information>`."""

    spec = SEARCH_TOOL
    description = "searches the documents for a query and returns the best passages"
    results = "search results"
    using = "searching"
    needs_corpus = True
    verb = CallVerb("search", "searches", "searched")
    drafted_from = "passages"
    card = ToolCard(
        "a query", "your application runs the\nquery (top-{top_k} passages of a BM25 index in "
        "training) and appends\n", "with the passages", "run the query",
        "searching a document collection",
        "question answering over the documents it\n  was trained to search, with the tag "
        "protocol above and a search tool that returns passages", "search queries",
        "Which river flows through the capital of the country where the author was born?")
    misses = ToolMisses(
        FailureLabel("no_search", "no search",
                     "the model answered without ever searching, and the answer is wrong"),
        None,
        FailureLabel("retrieval_miss", "retrieval miss", "the model searched, but no passage "
                     "it got back contains the gold answer"),
        FailureLabel("reasoning_miss", "reasoning miss", "a passage the model got back "
                     "contains the gold answer, yet its answer is wrong"))

    def __init__(self, backend: SearchBackend, top_k: int):
        self.backend, self.top_k = backend, top_k

    @classmethod
    def for_run(cls, backends: ToolBackends) -> Tool:
        if backends.search is None:
            raise ValueError("the search tool needs a corpus to search (data.corpus)")
        return cls(backends.search, backends.top_k)

    def execute(self, inputs: list[str]) -> list[object]:
        return [list(passages)[: self.top_k] for passages in self.backend(list(inputs))]

    def observation(self, result: object) -> str:
        return format_information(result, self.spec)


class CodeRun(Protocol):
    """What the python tool reads of a run (`studio.sandbox.Execution` is one): its output,
    its stderr, and None or the kind of failure ("timeout", "exception: NameError", ...)."""

    stdout: str
    stderr: str
    error: str | None


CodeExecutor = Callable[[list[str]], list[CodeRun]]
"""Snippets -> one finished run each, in order (`studio.sandbox.Sandbox.run_batch`)."""

NO_OUTPUT = "(no output)"


@dataclass(frozen=True)
class ToolBackends:
    """What a run offers its tools to execute with (`Tool.for_run`): the search backend
    (None for a run without a corpus) and its passages per search, and a way to open the
    code executor, called only by a run with a tool that runs code (a sandbox refuses to
    start where it cannot isolate the code)."""

    search: SearchBackend | None
    top_k: int
    code: Callable[[], CodeExecutor]


@register_tool
class PythonTool(Tool):
    """Python the model writes in `<code>`, run in a sandbox; its printed output (and the
    error's last line when it failed) comes back in `<output>`."""

    spec = PYTHON_TOOL
    can_fail = True
    results = "program output"
    using = "running Python"
    drafted_from = "arithmetic"
    arithmetic_call = "print({expression})"
    card = ToolCard(
        "a Python program", "your application runs it\nin a sandbox (in training: a "
        "throw-away bubblewrap sandbox with no network, {wall:g} s and {cpu} CPU seconds "
        "at most) and appends\n", "with what it printed (and the last line of its error, if "
        "it failed)", "run the program in a sandbox", "running Python code",
        "answering questions by writing Python code, with the tag protocol above and a\n  "
        "sandbox that runs it and returns what it printed", "code",
        "How many seconds are there in 17 days?")
    description = ("runs a Python program in a sandbox and returns what it prints (or its "
                   "error); print what you need")
    misses = ToolMisses(
        FailureLabel("no_call", "no call",
                     "the model answered without running Python, and the answer is wrong"),
        FailureLabel("call_failed", "call failed", "the model ran Python, but every program "
                     "failed (an exception, or a time or memory limit)"),
        FailureLabel("wrong_program", "wrong program",
                     "a program ran, but none printed the gold answer"),
        FailureLabel("copied_wrong", "copied wrong", "a program printed the gold answer, yet "
                     "the model answered something else"))

    def __init__(self, executor: CodeExecutor):
        self.executor = executor

    @classmethod
    def for_run(cls, backends: ToolBackends) -> Tool:
        return cls(backends.code())

    def execute(self, inputs: list[str]) -> list[object]:
        return list(self.executor(list(inputs)))

    def observation(self, result: object) -> str:
        run: CodeRun = result  # type: ignore[assignment]
        lines = [run.stdout.rstrip()] if run.stdout.strip() else []
        if run.error:
            lines.append(_error_line(run))
        return result_block("\n".join(lines) or NO_OUTPUT, self.spec)

    def failed(self, result: object) -> bool:
        return result.error is not None  # type: ignore[attr-defined]


@register_tool
class CalculatorTool(Tool):
    """An arithmetic expression in `<calc>`, its value in `<result>`
    (`studio.method.arithmetic`: exact, bounded, no `eval`). It needs nothing installed and
    does no I/O, so it runs wherever the studio does."""

    spec = CALCULATOR_TOOL
    can_fail = True
    results = "calculator results"
    using = "calling the calculator"
    drafted_from = "arithmetic"
    card = ToolCard(
        "an arithmetic expression", "your application evaluates it\n(in training: numbers, "
        "+ - * / // % ** and parentheses, computed exactly, nothing else run) and appends\n",
        "with its value (or a short error)", "evaluate the expression",
        "handing arithmetic to a calculator",
        "answering arithmetic questions by writing the expression for a calculator, with the "
        "tag\n  protocol above and a calculator that returns its value",
        "expressions", "What is 4837 times 29?")
    description = ("evaluates an arithmetic expression (numbers, + - * / // % ** and "
                   "parentheses) and returns its value")
    misses = ToolMisses(
        FailureLabel("no_call", "no call", "the model answered without calling the "
                     "calculator, and the answer is wrong"),
        FailureLabel("call_failed", "call failed", "the model called the calculator, but "
                     "every expression it wrote came back as an error"),
        FailureLabel("wrong_expression", "wrong expression", "the calculator computed the "
                     "model's expressions, but no result is the gold answer: an expression "
                     "was wrong or incomplete"),
        FailureLabel("copied_wrong", "copied wrong", "a calculator result is the gold answer, "
                     "yet the model answered something else (a slip in copying it, or a number "
                     "from the question)"))
    holds_answer = "is"

    def execute(self, inputs: list[str]) -> list[object]:
        return [calculate(expression) for expression in inputs]

    def observation(self, result: object) -> str:
        calculation: Calculation = result  # type: ignore[assignment]
        return result_block(calculation.text, self.spec)

    def failed(self, result: object) -> bool:
        return result.error is not None  # type: ignore[attr-defined]


def _error_line(run: CodeRun) -> str:
    """A traceback's last line ("NameError: name 'x' is not defined"), else the error kind."""
    if run.error and (run.error.startswith("exception") or run.error == "memory"):
        tail = [line for line in run.stderr.splitlines() if line.strip()]
        if tail:
            return tail[-1].strip()
    return f"Error: {run.error}"


def tools_for_run(names: Sequence[str], backends: ToolBackends) -> list[Tool]:
    """One registered tool per name, in the config's order (the first tool is the one the
    corrective message names)."""
    named_specs(names)
    return [TOOLS[name].for_run(backends) for name in names]


def specs(tools: Sequence[Tool]) -> tuple[ToolSpec, ...]:
    return tuple(t.spec for t in tools)


def named_specs(names: Sequence[str]) -> tuple[ToolSpec, ...]:
    """The tag specs of registered tools by name (a run config's `tools`), in that order."""
    unknown = [name for name in names if name not in TOOLS]
    if unknown:
        raise ValueError(f"unknown tool '{unknown[0]}'; known tools: {', '.join(TOOLS)}")
    return tuple(TOOLS[name].spec for name in names)


def check_tool_names(tools: object) -> tuple[str, ...]:
    """Tool names as a run or an evaluation lists them: registered, at least one, each
    once; ValueError says which is wrong."""
    if isinstance(tools, str) or not isinstance(tools, (list, tuple)) or not tools:
        raise ValueError(f"name at least one tool in a list, not {tools!r}")
    twice = sorted({name for name in tools if list(tools).count(name) > 1})
    if twice:
        raise ValueError(f"'{twice[0]}' is listed more than once")
    named_specs(tools)
    return tuple(tools)


def results_words(names: Sequence[str]) -> str:
    """What the result blocks of the named tools hold: "search results and program output"."""
    return " and ".join(TOOLS[name].results for name in names)


def using_words(names: Sequence[str]) -> str:
    """Using the named tools, in words: "searching or running Python"."""
    return " or ".join(TOOLS[name].using for name in names)


def corpus_tools(names: Sequence[str]) -> list[str]:
    """The named (registered) tools that read the run's corpus: a run with none names none."""
    return [name for name in names if TOOLS[name].needs_corpus]


def sole_verb(names: Sequence[str]) -> CallVerb | None:
    """The call verb of the one tool named, where it has one; None for several tools."""
    return TOOLS[names[0]].verb if len(names) == 1 and names[0] in TOOLS else None


def drafted_tools() -> tuple[str, ...]:
    """The registered tools the studio drafts exemplars for, in registration order."""
    return tuple(name for name, tool in TOOLS.items() if tool.drafted_from)


def all_specs() -> tuple[ToolSpec, ...]:
    """Every registered tool's tags: what a viewer parses a stored rollout of any run with."""
    return named_specs(tuple(TOOLS))


def run_tool(tool: Tool, inputs: list[str]) -> list[object]:
    """`tool.execute(inputs)`, checked to give one result per input."""
    results = list(tool.execute(list(inputs)))
    if len(results) != len(inputs):
        raise ValueError(f"{tool.spec.name} returned {len(results)} result lists for "
                         f"{len(inputs)} inputs")
    return results
