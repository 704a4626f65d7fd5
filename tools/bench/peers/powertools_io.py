"""Powertools for AWS Lambda (Python) on I/O-bound work: each record's handler parses the body,
awaits a downstream that answers after LATENCY_MS, and fails when the order's status is `fail`.
Standard queues: AsyncBatchProcessor (records gathered concurrently). FIFO: SqsFifoPartialProcessor,
the only FIFO processor Powertools Python has (synchronous: the downstream is waited for in turn).

Usage: python powertools_io.py EVENT LATENCY_MS standard|fifo. Each line read from stdin is a number
of runs to make back to back; their median is printed on one JSON line."""
import asyncio
import json
import statistics
import sys
import time

import aws_lambda_powertools
from aws_lambda_powertools.utilities.batch import (
    AsyncBatchProcessor,
    EventType,
    SqsFifoPartialProcessor,
    async_process_partial_response,
    process_partial_response,
)

VERSION = aws_lambda_powertools.__version__


def main(path, latency_ms, mode):
    raw = open(path, "rb").read()
    latency = float(latency_ms) / 1000

    async def async_handler(record):
        order = json.loads(record.body)
        await asyncio.sleep(latency)
        if order["status"] == "fail":
            raise ValueError("status is fail")

    def sync_handler(record):
        order = json.loads(record.body)
        time.sleep(latency)
        if order["status"] == "fail":
            raise ValueError("status is fail")

    if mode == "fifo":
        name, processor = "SqsFifoPartialProcessor", SqsFifoPartialProcessor()

        def once(event):
            return process_partial_response(event=event, record_handler=sync_handler, processor=processor, context=None)
    else:
        name, processor = "AsyncBatchProcessor", AsyncBatchProcessor(event_type=EventType.SQS)

        def once(event):
            return async_process_partial_response(event=event, record_handler=async_handler, processor=processor, context=None)

    for line in sys.stdin:
        samples = []
        for _ in range(int(line)):
            started = time.perf_counter()
            response = once(json.loads(raw))
            out = json.dumps(response).encode()
            samples.append((time.perf_counter() - started) * 1000)
            assert out
        result = {"name": f"Powertools Python {VERSION} {name}", "ms": statistics.median(samples), "failures": len(response["batchItemFailures"])}
        print(json.dumps([result]), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
