"""The grouping row's peer: read every message of a DLQ with boto3 as a browsing client does
(ReceiveMessage 10 at a time, hidden while read, then ChangeMessageVisibilityBatch to 0), and
print how many and the seconds it took. Arguments: the endpoint URL and the queue URL."""
import sys
import time

import boto3

endpoint, queue_url = sys.argv[1], sys.argv[2]
sqs = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1",
                   aws_access_key_id="bench", aws_secret_access_key="bench")
started = time.perf_counter()
seen, handles = set(), []
while True:
    messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10,
                                   VisibilityTimeout=120, WaitTimeSeconds=1,
                                   MessageAttributeNames=["All"]).get("Messages", [])
    if not messages:
        break
    for message in messages:
        if message["MessageId"] not in seen:
            seen.add(message["MessageId"])
            handles.append(message["ReceiptHandle"])
for first in range(0, len(handles), 10):
    entries = [{"Id": str(i), "ReceiptHandle": handle, "VisibilityTimeout": 0}
               for i, handle in enumerate(handles[first:first + 10])]
    sqs.change_message_visibility_batch(QueueUrl=queue_url, Entries=entries)
print(len(seen), time.perf_counter() - started)
