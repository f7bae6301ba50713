#!/usr/bin/env python3
"""Python's concurrent.futures on the measurements bench_executor makes for weft, for
comparison in docs/PERFORMANCE.md (the textbook's own executors). Run:

    python3 bench/peers/concurrent_futures.py
"""
import concurrent.futures as cf
import statistics
import time


def identity(x):
    return x


def latency_us(ex, rounds):
    ex.submit(identity, 0).result()  # start the workers
    times = []
    for i in range(rounds):
        t = time.perf_counter()
        ex.submit(identity, i).result()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def throughput(ex, n):
    t = time.perf_counter()
    futures = [ex.submit(identity, i) for i in range(n)]
    total = sum(f.result() for f in futures)
    assert total == n * (n - 1) // 2
    return n / (time.perf_counter() - t)


def map_rate(ex, n, chunksize):
    t = time.perf_counter()
    total = sum(ex.map(identity, range(n), chunksize=chunksize))
    assert total == n * (n - 1) // 2
    return n / (time.perf_counter() - t)


def main():
    with cf.ThreadPoolExecutor(2) as ex:
        print(f"ThreadPoolExecutor(2)  latency {latency_us(ex, 2000):8.1f} us   "
              f"throughput {throughput(ex, 100_000):12,.0f} tasks/s")
    with cf.ProcessPoolExecutor(2) as ex:
        print(f"ProcessPoolExecutor(2) latency {latency_us(ex, 2000):8.1f} us   "
              f"throughput {throughput(ex, 20_000):12,.0f} tasks/s   "
              f"map(chunksize=1000) {map_rate(ex, 1_000_000, 1000):12,.0f} items/s")


if __name__ == "__main__":
    main()
