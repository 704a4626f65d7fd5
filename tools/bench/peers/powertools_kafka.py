"""Powertools for AWS Lambda (Python) on the benchmark's Kafka event: each record's handler decodes
the value, parses the order and fails when its status is `fail`, timed in process from event bytes
in to response bytes out.

Usage: python powertools_kafka.py EVENT LATENCY_MS. LATENCY_MS 0: BatchProcessor(EventType.Kafka),
the CPU-bound row. Above 0, each handler awaits a downstream that answers after LATENCY_MS, in two
modes: BatchProcessor (records in turn: each partition's order kept) and AsyncBatchProcessor (every
record of the batch at once: a partition's order not kept). Each line read from stdin is a number of
runs to make back to back; each mode's median is printed, all on one JSON line."""
import asyncio
import json
import statistics
import sys
import time

import aws_lambda_powertools
from aws_lambda_powertools.utilities.batch import (
    AsyncBatchProcessor,
    BatchProcessor,
    EventType,
    async_process_partial_response,
    process_partial_response,
)

VERSION = aws_lambda_powertools.__version__


def main(path, latency_ms):
    raw = open(path, "rb").read()
    latency = float(latency_ms) / 1000

    def sync_handler(record):
        order = record.json_value
        if latency:
            time.sleep(latency)
        if order["status"] == "fail":
            raise ValueError("status is fail")

    async def async_handler(record):
        order = record.json_value
        await asyncio.sleep(latency)
        if order["status"] == "fail":
            raise ValueError("status is fail")

    in_turn = BatchProcessor(event_type=EventType.Kafka)
    modes = [("BatchProcessor", lambda event: process_partial_response(event=event, record_handler=sync_handler, processor=in_turn, context=None))]
    if latency:
        at_once = AsyncBatchProcessor(event_type=EventType.Kafka)
        modes.append(("AsyncBatchProcessor", lambda event: async_process_partial_response(event=event, record_handler=async_handler, processor=at_once, context=None)))

    for line in sys.stdin:
        results = []
        for name, once in modes:
            samples = []
            for _ in range(int(line)):
                started = time.perf_counter()
                response = once(json.loads(raw))
                out = json.dumps(response).encode()
                samples.append((time.perf_counter() - started) * 1000)
                assert out
            results.append({"name": f"Powertools Python {VERSION} {name} (Kafka)", "ms": statistics.median(samples), "failures": len(response["batchItemFailures"])})
        print(json.dumps(results), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
