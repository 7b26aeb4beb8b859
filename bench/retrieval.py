"""Benchmark of the search tool's engine (studio.retrieval): speed, memory, HTTP, quality.

    .venv/bin/python bench/retrieval.py                 # 10k, 100k and 1M passages
    .venv/bin/python bench/retrieval.py --sizes 10k,100k --quick
    .venv/bin/python bench/retrieval.py --retrieve-memory 50   # /retrieve memory, 100k passages

* Synthetic corpora (fixed seed) drawn from the word statistics of the real
  corpora in ../shared/data: word unigram frequencies of the three
  corpus.jsonl files (raw whitespace words, case and punctuation kept, so
  tokenisation does real work), passage lengths drawn from the real passages
  (documents cut into 100-word passages as the studio does; --passage-words N
  makes every passage N words instead, e.g. 100 for wiki-18-like passages),
  titles drawn likewise from the real titles.
* Each index is built in a fresh child process (spawned, not forked), so its
  peak RSS (VmHWM) is that build's alone; generating the passages is timed
  separately and subtracted from the build time.
* Queries are real questions (HotpotQA, MuSiQue, NQ, TriviaQA, PopQA) from
  ../shared/data; latencies are medians (QPS = 1 / median latency, batched:
  64 / median batch time), measured in a child that loads the saved index.
* /retrieve: the studio's own web app (served by uvicorn on 127.0.0.1, token
  auth, a corpus row pointing at the saved index), Search-R1's request and
  answer at /api/v1/corpora/{id}/retrieve; p50/p95 of one request (1 query,
  topk 3) over a keep-alive connection.
* /retrieve memory (``--retrieve-memory REQUESTS``, alone): the same web app, sent the
  largest request it accepts (256 queries of 2,000 characters, topk 50, with scores)
  REQUESTS times; the growth of its peak RSS, private and mapped memory after 1, 10, ...
  requests.
* Quality: recall@3/@5 of the gold paragraphs of HotpotQA dev and MuSiQue
  train (supporting facts / is_supporting paragraphs of the original JSON)
  over their own corpus.jsonl, per backend; top-3 agreement of the backends.

Nothing here asserts timings; it prints markdown tables (docs/retrieval.md).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import random
import shutil
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("DISABLE_TQDM", "1")

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from studio.retrieval import (  # noqa: E402
    Bm25Params,
    Passage,
    build_index,
    load_index,
    save_index,
    split_into_passages,
)

DATA = ROOT.parent / "shared" / "data"
CORPORA = ("hotpotqa-dev100", "hotpotqa-train100", "musique-train100")
SEED = 1234
BATCH = 64
PARAMS = Bm25Params()  # the studio's default: English stop words, no stemming


# --------------------------------------------------------------------------- data


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def real_questions(data: Path, seed: int = SEED) -> list[str]:
    """All questions of ../shared/data, shuffled with a fixed seed."""
    qs = []
    for name in CORPORA:
        qs += [r["question"] for r in read_jsonl(data / name / "qa.jsonl")]
    for path in sorted((data / "qa-only").glob("*.jsonl")):
        qs += [r["question"] for r in read_jsonl(path)]
    random.Random(seed).shuffle(qs)
    return qs


class CorpusModel:
    """Word statistics of the real corpora, to draw synthetic passages from."""

    def __init__(self, data: Path, passage_words: int | None = None) -> None:
        from collections import Counter

        words, title_words = Counter(), Counter()
        lengths, title_lengths = [], []
        for name in CORPORA:
            for doc in read_jsonl(data / name / "corpus.jsonl"):
                words.update(doc["text"].split())
                title_words.update(doc["title"].split())
                title_lengths.append(max(1, len(doc["title"].split())))
                for p in split_into_passages(doc["id"], doc["title"], doc["text"]):
                    lengths.append(len(p.text.split()))
        self.words = list(words)
        self.cdf = np.cumsum(np.array([words[w] for w in self.words], dtype=np.float64))
        self.cdf /= self.cdf[-1]
        self.title_words = list(title_words)
        self.title_cdf = np.cumsum(np.array([title_words[w] for w in self.title_words], float))
        self.title_cdf /= self.title_cdf[-1]
        self.lengths = np.array(lengths if passage_words is None else [passage_words])
        self.title_lengths = np.array(title_lengths)

    def passages(self, n: int, seed: int = SEED, chunk: int = 10_000) -> Iterator[Passage]:
        rng = np.random.default_rng(seed)
        words, twords = self.words, self.title_words
        for start in range(0, n, chunk):
            m = min(chunk, n - start)
            lens = rng.choice(self.lengths, size=m)
            tlens = rng.choice(self.title_lengths, size=m)
            ids = np.searchsorted(self.cdf, rng.random(int(lens.sum())), side="right").tolist()
            tids = np.searchsorted(self.title_cdf, rng.random(int(tlens.sum())), "right").tolist()
            w = [words[i] for i in ids]
            tw = [twords[i] for i in tids]
            a = ta = 0
            for j in range(m):
                b, tb = a + int(lens[j]), ta + int(tlens[j])
                yield Passage(str(start + j), " ".join(tw[ta:tb]), " ".join(w[a:b]))
                a, ta = b, tb


class TimedIter:
    """Wraps an iterator and adds up the time spent producing its items."""

    def __init__(self, it: Iterator) -> None:
        self._it = it
        self.seconds = 0.0

    def __iter__(self) -> TimedIter:
        return self

    def __next__(self):
        t = time.perf_counter()
        try:
            return next(self._it)
        finally:
            self.seconds += time.perf_counter() - t


def proc_status_mb(pid: int | str = "self") -> dict[str, float]:
    """VmRSS, VmHWM (peak RSS), RssAnon and RssFile of a process in MB, from /proc."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) / 1024
    return out


def reset_peak_rss() -> bool:
    """Reset this process's VmHWM to its current RSS (Linux: clear_refs 5)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


# --------------------------------------------------------------------------- children


def _child_build(args: dict, queue) -> None:
    try:
        model = CorpusModel(Path(args["data"]), args["passage_words"])
        reset_peak_rss()  # the peak is the build's, not reading the real corpora's
        rss_before = proc_status_mb()["VmRSS"]
        gen = TimedIter(model.passages(args["size"], args["seed"]))
        reports = []
        t0 = time.perf_counter()
        index = build_index(gen, PARAMS, args["backend"], on_progress=reports.append)
        total = time.perf_counter() - t0
        hwm = proc_status_mb()["VmHWM"]
        t1 = time.perf_counter()
        save_index(index, Path(args["folder"]))
        save_s = time.perf_counter() - t1
        queue.put(
            {
                "build_s": total - gen.seconds,
                "generate_s": gen.seconds,
                "save_s": save_s,
                "peak_rss_mb": hwm,
                "rss_before_mb": rss_before,
                "vocabulary": index.vocab_size,
                "progress_reports": len(reports),
                "last_report": reports[-1] if reports else None,
            }
        )
    except BaseException as e:  # report, don't hang the parent
        queue.put({"error": repr(e)})
        raise


def _child_query(args: dict, queue) -> None:
    try:
        rss0 = proc_status_mb()["VmRSS"]
        t0 = time.perf_counter()
        index = load_index(Path(args["folder"]))
        load_s = time.perf_counter() - t0
        rss_loaded = proc_status_mb()["VmRSS"]
        queries = args["queries"]
        index.search(queries[:5], 3)  # warm-up
        single, top3 = [], []
        for q in queries[: args["n_single"]]:
            t = time.perf_counter()
            hits = index.search([q], 3)[0]
            single.append(time.perf_counter() - t)
            top3.append([h.passage.id for h in hits])
        batched = []
        for i in range(args["n_batches"]):
            batch = queries[i * BATCH : (i + 1) * BATCH]
            if len(batch) < BATCH:
                break
            t = time.perf_counter()
            index.search(batch, 3)
            batched.append(time.perf_counter() - t)
        rss_end = proc_status_mb()["VmRSS"]
        queue.put(
            {
                "load_s": load_s,
                "rss_loaded_mb": rss_loaded - rss0,
                "rss_end_mb": rss_end,
                "single_ms": statistics.median(single) * 1e3,
                "single_n": len(single),
                "batch_ms": statistics.median(batched) * 1e3 if batched else None,
                "batch_n": len(batched),
                "top3": top3,
            }
        )
    except BaseException as e:
        queue.put({"error": repr(e)})
        raise


def prepare_studio(folder: Path, data_dir: Path) -> tuple[int, str]:
    """A studio database whose corpus row points at the built index; its id and an API token."""
    from studio.services.auth import bootstrap_admin
    from studio.settings import Settings
    from studio.storage import db
    from studio.storage.tables import Corpus, CorpusStatus

    settings = Settings(data_dir=data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    db.upgrade(settings.sqlalchemy_url)
    with db.session_scope(settings.sqlalchemy_url) as session:
        token = bootstrap_admin(session).token
        corpus = Corpus(name="bench", source_filename="synthetic", content_hash="",
                        upload_path="synthetic", index_path=str(folder.resolve()),
                        status=CorpusStatus.ready, num_passages=len(load_index(folder)))
        session.add(corpus)
        session.flush()
        return corpus.id, token


def _child_serve(data_dir: str, port: int) -> None:
    """The studio's own web app (API, auth, database), as `studio web` serves it."""
    import uvicorn

    from frontend.server import create_app
    from studio.settings import Settings

    uvicorn.run(create_app(Settings(data_dir=data_dir)), host="127.0.0.1", port=port,
                log_level="warning")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_child(target, args: dict, timeout: float = 1800) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(args, queue))
    proc.start()
    try:
        result = queue.get(timeout=timeout)
    finally:
        proc.join(timeout=60)
        if proc.is_alive():
            proc.kill()
    if "error" in result:
        raise RuntimeError(f"child failed: {result['error']}")
    return result


@contextmanager
def serving(folder: Path):
    """The studio's web app serving the index at ``folder`` in a child process, its index
    loaded: ``(the process, the corpus's /retrieve URL, an authorised httpx client)``."""
    import httpx

    data_dir = Path(tempfile.mkdtemp(prefix="bench-studio-"))
    corpus_id, token = prepare_studio(folder, data_dir)
    ctx = mp.get_context("spawn")
    port = _free_port()
    server = ctx.Process(target=_child_serve, args=(str(data_dir), port))
    server.start()
    try:
        url = f"http://127.0.0.1:{port}/api/v1/corpora/{corpus_id}/retrieve"
        deadline = time.time() + 600
        with httpx.Client(timeout=120, headers={"Authorization": f"Bearer {token}"}) as client:
            while True:
                try:
                    client.post(url, json={"queries": ["warm up"], "topk": 3}).raise_for_status()
                    break
                except httpx.TransportError:
                    if time.time() > deadline or not server.is_alive():
                        raise RuntimeError("the studio did not start") from None
                    time.sleep(0.2)
            yield server, url, client
    finally:
        server.terminate()
        server.join(timeout=30)
        if server.is_alive():
            server.kill()
        shutil.rmtree(data_dir, ignore_errors=True)


def measure_http(folder: Path, queries: list[str], n: int) -> dict:
    with serving(folder) as (server, url, client):
        for q in queries[:10]:
            client.post(url, json={"queries": [q], "topk": 3, "return_scores": True})
        lat = []
        for q in queries[:n]:
            t = time.perf_counter()
            r = client.post(url, json={"queries": [q], "topk": 3, "return_scores": True})
            lat.append(time.perf_counter() - t)
            r.raise_for_status()
            assert len(r.json()["result"]) == 1
        mem = proc_status_mb(server.pid)
    lat_ms = np.array(lat) * 1e3
    return {
        "p50_ms": float(np.percentile(lat_ms, 50)),
        "p95_ms": float(np.percentile(lat_ms, 95)),
        "n": len(lat),
        "server_rss_mb": mem["VmRSS"],
        "server_anon_mb": mem["RssAnon"],
        "server_file_mb": mem["RssFile"],
    }


def largest_retrieve_body(queries: list[str]) -> dict:
    """The largest /retrieve request the studio accepts: MAX_RETRIEVE_QUERIES queries of
    MAX_QUERY_CHARS characters (real questions run together: many distinct terms, so many
    candidate passages to score), ``topk`` MAX_TOP_K, with scores."""
    from studio.retrieval import MAX_RETRIEVE_QUERIES
    from studio.services.corpora import MAX_QUERY_CHARS, MAX_TOP_K

    long_queries = []
    for i in range(MAX_RETRIEVE_QUERIES):
        words = " ".join(queries[(i * 20 + j) % len(queries)] for j in range(40))
        long_queries.append(words[:MAX_QUERY_CHARS])
    return {"queries": long_queries, "topk": MAX_TOP_K, "return_scores": True}


def measure_retrieve_memory(folder: Path, queries: list[str], requests: int) -> list[dict]:
    """The serving process's memory over ``requests`` of the largest /retrieve request, one
    after another: growth over its size once the index is loaded, after 1, 10, ... requests.
    Its peak (VmHWM) is reset first, so the peak is the requests' own; private (anonymous)
    memory is what requests hold, mapped files the index pages that searching read."""
    body = largest_retrieve_body(queries)
    checkpoints = {n for n in (1, 2, 5, 10, 20, 50, 100, 200, 500) if n < requests} | {requests}
    rows = []
    with serving(folder) as (server, url, client):
        with open(f"/proc/{server.pid}/clear_refs", "w") as refs:
            refs.write("5")
        base = proc_status_mb(server.pid)
        seconds = 0.0
        for n in range(1, requests + 1):
            t = time.perf_counter()
            r = client.post(url, json=body)
            seconds += time.perf_counter() - t
            r.raise_for_status()
            if n in checkpoints:
                mem = proc_status_mb(server.pid)
                rows.append({"requests": n, "s_per_request": seconds / n,
                             "answer_mb": len(r.content) / 1e6,
                             "peak_mb": mem["VmHWM"] - base["VmRSS"],
                             "anon_mb": mem["RssAnon"] - base["RssAnon"],
                             "file_mb": mem["RssFile"] - base["RssFile"]})
    return rows


# --------------------------------------------------------------------------- quality


def gold_sets(data: Path, name: str, corpus: list[dict]) -> list[tuple[str, set[str]]]:
    """(question, ids of its gold passages in corpus.jsonl) for each question."""
    by_title: dict[str, list[dict]] = {}
    for doc in corpus:
        by_title.setdefault(doc["title"], []).append(doc)
    out = []
    if name.startswith("musique"):
        for row in json.loads((data / name / "musique_train100.json").read_text()):
            gold = set()
            for p in row["paragraphs"]:
                if p["is_supporting"]:
                    gold |= {
                        d["id"] for d in by_title[p["title"]] if d["text"] == p["paragraph_text"]
                    }
            out.append((row["question"], gold))
    else:
        src = {"hotpotqa-dev100": "hotpot_dev_distractor_sample100.json"}[name]
        for row in json.loads((data / name / src).read_text()):
            titles = {t for t, _ in row["supporting_facts"]}
            out.append((row["question"], {d["id"] for t in titles for d in by_title[t]}))
    return out


def quality(data: Path) -> list[dict]:
    rows = []
    for name in ("hotpotqa-dev100", "musique-train100"):
        corpus = read_jsonl(data / name / "corpus.jsonl")
        passages = [Passage(d["id"], d["title"], d["text"]) for d in corpus]
        gold = gold_sets(data, name, corpus)
        questions = [q for q, _ in gold]
        for params in (PARAMS, Bm25Params(stemmer="english")):
            tops = {}
            for backend in ("bm25s", "rank-bm25"):
                index = build_index(passages, params, backend)
                results = index.search(questions, 5)
                tops[backend] = [[h.passage.id for h in hits] for hits in results]
                row = {"corpus": name, "stemmer": params.stemmer or "-", "backend": backend}
                for k in (3, 5):
                    found = [
                        len(set(ids[:k]) & g)
                        for ids, (_, g) in zip(tops[backend], gold, strict=True)
                    ]
                    row[f"recall@{k}"] = sum(
                        f / len(g) for f, (_, g) in zip(found, gold, strict=True)
                    ) / len(gold)
                    row[f"any@{k}"] = sum(f > 0 for f in found) / len(gold)
                    row[f"all@{k}"] = sum(
                        f == len(g) for f, (_, g) in zip(found, gold, strict=True)
                    ) / len(gold)
                rows.append(row)
            a, b = tops["bm25s"], tops["rank-bm25"]
            rows[-1]["agree_top3"] = rows[-2]["agree_top3"] = sum(
                x[:3] == y[:3] for x, y in zip(a, b, strict=True)
            ) / len(a)
    return rows


def real_agreement(data: Path, limit: int | None = None) -> dict:
    """Top-3 agreement of the backends over every question against each real corpus."""
    same = total = 0
    for name in CORPORA:
        corpus = read_jsonl(data / name / "corpus.jsonl")
        passages = [Passage(d["id"], d["title"], d["text"]) for d in corpus]
        questions = real_questions(data)[:limit]
        a = build_index(passages, PARAMS, "bm25s").search(questions, 3)
        b = build_index(passages, PARAMS, "rank-bm25").search(questions, 3)
        for x, y in zip(a, b, strict=True):
            same += [h.passage.id for h in x] == [h.passage.id for h in y]
            total += 1
    return {"same": same, "total": total}


# --------------------------------------------------------------------------- main


def parse_size(text: str) -> int:
    t = text.strip().lower().replace("_", "")
    mult = {"k": 1_000, "m": 1_000_000}.get(t[-1:], 1)
    return int(float(t[:-1] if mult > 1 else t) * mult)


def fmt_size(n: int) -> str:
    return (
        f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n // 1000}k" if n % 1000 == 0 else str(n)
    )


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=None, help="comma-separated, e.g. 10k,100k,1M")
    ap.add_argument("--quick", action="store_true", help="fewer queries; default sizes 10k,100k")
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--passage-words", type=int, default=None, help="fixed passage length")
    ap.add_argument("--rank-bm25-max", default="100k", help="largest size rank-bm25 runs at")
    ap.add_argument("--no-quality", action="store_true")
    ap.add_argument("--workdir", type=Path, default=None, help="where indexes go (temp dir)")
    ap.add_argument("--retrieve-memory", type=int, default=None, metavar="REQUESTS",
                    help="only measure the web app's memory over REQUESTS of the largest "
                    "/retrieve request, at each size (default 100k)")
    args = ap.parse_args(argv)
    if args.retrieve_memory:
        return retrieve_memory_main(args)
    sizes = [
        parse_size(s)
        for s in (args.sizes or ("10k,100k" if args.quick else "10k,100k,1M")).split(",")
    ]
    rank_max = parse_size(args.rank_bm25_max)
    quick = args.quick
    data = args.data.resolve()
    work = Path(tempfile.mkdtemp(prefix="retrieval-bench-", dir=args.workdir))
    queries = real_questions(data)
    started = time.time()
    print(f"# studio.retrieval benchmark, {time.strftime('%Y-%m-%d %H:%M')}")
    print(
        f"machine: {os.cpu_count()} vCPU, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}, numpy {np.__version__}; "
        f"params {PARAMS}; queries: {len(queries)} real questions; "
        f"passage length: {args.passage_words or 'real distribution'} words\n",
        flush=True,
    )
    builds, queries_res, https = {}, {}, {}
    try:
        for n in sizes:
            for backend in ("bm25s", "rank-bm25"):
                if backend == "rank-bm25" and n > rank_max:
                    continue
                folder = work / f"{backend}-{fmt_size(n)}"
                b = _run_child(
                    _child_build,
                    {
                        "data": str(data),
                        "passage_words": args.passage_words,
                        "size": n,
                        "seed": SEED,
                        "backend": backend,
                        "folder": str(folder),
                    },
                )
                builds[n, backend] = b
                print(
                    f"built {backend} {fmt_size(n)}: {b['build_s']:.1f} s "
                    f"(+{b['generate_s']:.1f} s generating), peak RSS {b['peak_rss_mb']:.0f} MB",
                    flush=True,
                )
                if backend == "bm25s":
                    n_single, n_batches = (100, 2) if quick else (400, 6)
                elif n <= 10_000:
                    n_single, n_batches = (20, 1) if quick else (100, 2)
                else:
                    n_single, n_batches = (5, 0) if quick else (20, 1)
                q = _run_child(
                    _child_query,
                    {
                        "folder": str(folder),
                        "queries": queries,
                        "n_single": n_single,
                        "n_batches": n_batches,
                    },
                )
                queries_res[n, backend] = q
                print(
                    f"  queries: single {q['single_ms']:.2f} ms (n={q['single_n']}), "
                    f"batch of 64 {q['batch_ms'] or float('nan'):.1f} ms, load {q['load_s']:.2f} s",
                    flush=True,
                )
                if backend == "bm25s":
                    https[n] = measure_http(folder, queries, 100 if quick else 300)
                    print(f"  /retrieve p50 {https[n]['p50_ms']:.2f} ms", flush=True)
                shutil.rmtree(folder, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print("\n## Index build (each in a fresh process; passage generation excluded)\n")
    rows = []
    for (n, backend), b in builds.items():
        rows.append(
            [
                fmt_size(n),
                backend,
                f"{b['build_s']:.1f}",
                f"{b['peak_rss_mb']:.0f}",
                f"{b['rss_before_mb']:.0f}",
                f"{b['vocabulary']:,}",
                f"{b['save_s']:.1f}",
                f"{queries_res[n, backend]['load_s']:.2f}",
                f"{queries_res[n, backend]['rss_loaded_mb']:.0f}",
            ]
        )
    print(
        table(
            [
                "passages",
                "backend",
                "build s",
                "peak RSS MB",
                "RSS before MB",
                "vocabulary",
                "save s",
                "load s",
                "RSS added by load MB",
            ],
            rows,
        )
    )

    print("\n## Query speed (top-3, medians)\n")
    rows = []
    for n in sizes:
        s = queries_res.get((n, "bm25s"))
        r = queries_res.get((n, "rank-bm25"))
        s_q = 1e3 / s["single_ms"]
        s_b = BATCH * 1e3 / s["batch_ms"] if s["batch_ms"] else None
        r_q = 1e3 / r["single_ms"] if r else None
        r_b = BATCH * 1e3 / r["batch_ms"] if r and r["batch_ms"] else None
        agree = "-"
        if r:
            pairs = list(zip(s["top3"], r["top3"], strict=False))  # rank-bm25 ran fewer
            agree = f"{sum(a == b for a, b in pairs)}/{len(pairs)}"
        rows.append(
            [
                fmt_size(n),
                f"{s['single_ms']:.2f}",
                f"{s_q:,.0f}",
                f"{s_b:,.0f}" if s_b else "-",
                f"{r['single_ms']:,.1f}" if r else "-",
                f"{r_q:,.2f}" if r_q else "-",
                f"{r_b:,.2f}" if r_b else "-",
                f"{s_q / r_q:,.0f}x" if r_q else "-",
                f"{s_b / r_b:,.0f}x" if s_b and r_b else "-",
                agree,
            ]
        )
    print(
        table(
            [
                "passages",
                "bm25s ms/query",
                "bm25s QPS",
                "bm25s QPS batch 64",
                "rank-bm25 ms/query",
                "rank-bm25 QPS",
                "rank-bm25 QPS batch 64",
                "ratio single",
                "ratio batch",
                "same top-3",
            ],
            rows,
        )
    )

    print("\n## the studio's /retrieve over HTTP (its web app, token auth, 1 query, topk 3)\n")
    print(
        table(
            [
                "passages",
                "p50 ms",
                "p95 ms",
                "requests",
                "server RSS MB",
                "of which private (anon) MB",
                "of which mapped files MB",
            ],
            [
                [
                    fmt_size(n),
                    f"{h['p50_ms']:.2f}",
                    f"{h['p95_ms']:.2f}",
                    h["n"],
                    f"{h['server_rss_mb']:.0f}",
                    f"{h['server_anon_mb']:.0f}",
                    f"{h['server_file_mb']:.0f}",
                ]
                for n, h in https.items()
            ],
        )
    )

    if not args.no_quality:
        print("\n## Quality on real data (gold paragraphs from the original JSON)\n")
        rows = [
            [
                r["corpus"],
                r["stemmer"],
                r["backend"],
                f"{r['recall@3']:.3f}",
                f"{r['recall@5']:.3f}",
                f"{r['any@3']:.2f}",
                f"{r['any@5']:.2f}",
                f"{r['all@5']:.2f}",
                f"{r['agree_top3']:.2f}",
            ]
            for r in quality(data)
        ]
        print(
            table(
                [
                    "corpus",
                    "stemmer",
                    "backend",
                    "recall@3",
                    "recall@5",
                    "any gold@3",
                    "any gold@5",
                    "all gold@5",
                    "same top-3",
                ],
                rows,
            )
        )
        ag = real_agreement(data, 500 if quick else None)
        print(
            f"\nTop-3 agreement bm25s vs rank-bm25, {ag['total'] // len(CORPORA)} real questions x "
            f"{len(CORPORA)} real corpora: {ag['same']}/{ag['total']} "
            f"({100 * ag['same'] / ag['total']:.2f}%)"
        )

    print("\n## Targets\n")
    rows = []
    if (100_000, "rank-bm25") in queries_res:
        ratio = (
            queries_res[100_000, "rank-bm25"]["single_ms"]
            / queries_res[100_000, "bm25s"]["single_ms"]
        )
        rows.append(
            [
                "single-query QPS vs rank-bm25 at 100k",
                ">= 100x",
                f"{ratio:,.0f}x",
                "met" if ratio >= 100 else "MISSED",
            ]
        )
    if (1_000_000, "bm25s") in builds:
        b = builds[1_000_000, "bm25s"]
        rows.append(
            [
                "1M build time",
                "<= 180 s",
                f"{b['build_s']:.0f} s",
                "met" if b["build_s"] <= 180 else "MISSED",
            ]
        )
        rows.append(
            [
                "1M build peak RSS",
                "<= 4096 MB",
                f"{b['peak_rss_mb']:.0f} MB",
                "met" if b["peak_rss_mb"] <= 4096 else "MISSED",
            ]
        )
    if 1_000_000 in https:
        p50 = https[1_000_000]["p50_ms"]
        rows.append(
            ["/retrieve p50 at 1M", "< 20 ms", f"{p50:.1f} ms", "met" if p50 < 20 else "MISSED"]
        )
    print(table(["target", "goal", "measured", ""], rows) if rows else "(sizes too small)")
    print(f"\nwhole run: {time.time() - started:.0f} s")
    return 0


def retrieve_memory_main(args: argparse.Namespace) -> int:
    """``--retrieve-memory``: build a bm25s index of each size, serve it, send the largest
    /retrieve request again and again; a table of the serving process's memory."""
    sizes = [parse_size(s) for s in (args.sizes or "100k").split(",")]
    queries = real_questions(args.data.resolve())
    body = largest_retrieve_body(queries)
    print(f"# /retrieve memory, {time.strftime('%Y-%m-%d %H:%M')}: requests of "
          f"{len(body['queries'])} queries x {len(body['queries'][0])} characters, "
          f"topk {body['topk']}, with scores\n")
    rows = []
    work = Path(tempfile.mkdtemp(prefix="retrieval-bench-", dir=args.workdir))
    try:
        for n in sizes:
            folder = work / f"bm25s-{fmt_size(n)}"
            _run_child(_child_build, {"data": str(args.data.resolve()),
                                      "passage_words": args.passage_words, "size": n,
                                      "seed": SEED, "backend": "bm25s", "folder": str(folder)})
            index_mb = sum(f.stat().st_size for f in folder.iterdir()) / 1e6
            for r in measure_retrieve_memory(folder, queries, args.retrieve_memory):
                rows.append([fmt_size(n), f"{index_mb:.0f}", r["requests"],
                             f"{r['s_per_request']:.2f}", f"{r['answer_mb']:.1f}",
                             f"{r['peak_mb']:.0f}", f"{r['anon_mb']:.0f}", f"{r['file_mb']:.0f}"])
                print("| " + " | ".join(str(c) for c in rows[-1]) + " |", flush=True)
            shutil.rmtree(folder, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(table(["passages", "index MB", "requests", "s per request", "answer MB",
                 "peak RSS growth MB", "private memory growth MB", "mapped files growth MB"],
                rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
