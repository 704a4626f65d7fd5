"""Powertools for AWS Lambda (Python) BatchProcessor on the benchmark event: the same work as
redrive's benchmark handler, timed in process from event bytes in to response bytes out.

Each line read from stdin is a number of runs to make back to back; their median is printed as one
JSON line. redrive-bench runs ours right before and right after, so that a ratio compares runs a
second apart at most."""
import json
import statistics
import sys
import time

import aws_lambda_powertools
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

NAME = f"Powertools Python {aws_lambda_powertools.__version__} BatchProcessor"


def record_handler(record):
    order = json.loads(record.body)
    if order["status"] == "fail":
        raise ValueError("status is fail")


def main(path):
    raw = open(path, "rb").read()
    processor = BatchProcessor(event_type=EventType.SQS)
    for line in sys.stdin:
        samples = []
        for _ in range(int(line)):
            started = time.perf_counter()
            event = json.loads(raw)
            response = process_partial_response(event=event, record_handler=record_handler, processor=processor, context=None)
            out = json.dumps(response).encode()
            samples.append((time.perf_counter() - started) * 1000)
            assert out
        result = {"name": NAME, "ms": statistics.median(samples), "failures": len(response["batchItemFailures"])}
        print(json.dumps([result]), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
