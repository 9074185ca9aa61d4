#!/usr/bin/env python3
"""llama.cpp baseline for `cargo bench -p toolwright-local-model --bench local` (issue 15).

Measures the same GGUF with llama.cpp through its Python binding, 2 threads:
load time, prompt processing tok/s (the bench's ~300-token prompt, chat-templated)
and free-text generation tok/s (128 tokens sampled at temperature 0.7, EOS ignored,
counted as the bench counts: tokens after the first over the time after the first).

Install (builds llama.cpp from source with cmake/gcc; PyPI only, ~15 min on 2 cores):
    pip install llama-cpp-python==0.3.36

Usage: baseline.py MODEL.gguf [--runs N] [--threads N]
Prints one JSON object (medians) on stdout; exits 3 when llama_cpp is not installed.
"""
import json
import statistics
import sys
import time


def main() -> int:
    args = sys.argv[1:]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    model = args[0]
    runs = int(args[args.index("--runs") + 1]) if "--runs" in args else 5
    threads = int(args[args.index("--threads") + 1]) if "--threads" in args else 2
    try:
        import llama_cpp
    except ImportError:
        print("llama-cpp-python is not installed (pip install llama-cpp-python==0.3.36)", file=sys.stderr)
        return 3

    def load():
        return llama_cpp.Llama(model_path=model, n_threads=threads, n_threads_batch=threads,
                               n_ctx=2048, n_batch=512, verbose=False, seed=7)

    loads = []
    llm = None
    for _ in range(runs):
        del llm
        t = time.perf_counter()
        llm = load()
        loads.append((time.perf_counter() - t) * 1e3)

    def chat(user: str) -> bytes:
        return f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n".encode()

    long = "The quick brown fox jumps over the lazy dog while the tools report weather, time and sums. " * 16
    ptoks = llm.tokenize(chat(long), add_bos=False, special=True)
    pps = []
    for _ in range(runs):
        llm.reset()  # eval() drops the KV cache from position 0 on
        t = time.perf_counter()
        llm.eval(ptoks)
        pps.append(len(ptoks) / (time.perf_counter() - t))

    gtoks = llm.tokenize(chat("Write a long, detailed story about a lighthouse keeper."), add_bos=False, special=True)
    gens = []
    n_gen = 128
    for i in range(runs):
        llm.reset()  # eval() drops the KV cache from position 0 on
        llm.eval(gtoks)
        tok = llm.sample(temp=0.7, top_p=0.9, top_k=0)
        t = time.perf_counter()
        for _ in range(n_gen - 1):
            llm.eval([tok])
            tok = llm.sample(temp=0.7, top_p=0.9, top_k=0)
        gens.append((n_gen - 1) / (time.perf_counter() - t))

    print(json.dumps({
        "llama_cpp": llama_cpp.__version__,
        "threads": threads,
        "runs": runs,
        "load_ms": statistics.median(loads),
        "prompt_tokens": len(ptoks),
        "prompt_tps": statistics.median(pps),
        "gen_tokens": n_gen,
        "gen_tps": statistics.median(gens),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
