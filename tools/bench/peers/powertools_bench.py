"""Powertools for AWS Lambda (Python) BatchProcessor on the benchmark event: the same work as
redrive's benchmark handler, timed in process from event bytes in to response bytes out."""
import json
import statistics
import sys
import time

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

RUNS, WARMUP = 12, 2


def record_handler(record):
    order = json.loads(record.body)
    if order["status"] == "fail":
        raise ValueError("status is fail")


def main(path):
    raw = open(path, "rb").read()
    processor = BatchProcessor(event_type=EventType.SQS)
    samples, failures = [], 0
    for run in range(RUNS + WARMUP):
        started = time.perf_counter()
        event = json.loads(raw)
        response = process_partial_response(event=event, record_handler=record_handler, processor=processor, context=None)
        out = json.dumps(response).encode()
        elapsed = time.perf_counter() - started
        failures = len(response["batchItemFailures"])
        assert out
        if run >= WARMUP:
            samples.append(elapsed * 1000)
    version = __import__("aws_lambda_powertools").__version__ if hasattr(__import__("aws_lambda_powertools"), "__version__") else "3.37.0"
    print(json.dumps([{"name": f"Powertools Python {version} BatchProcessor", "median_ms": statistics.median(samples), "failures": failures}]))


if __name__ == "__main__":
    main(sys.argv[1])
