"""The Amazon SQS Extended Client and SNS Extended Client (PyPI amazon-sqs-extended-client and
amazon-sns-extended-client, pinned in tools/requirements.txt) as peers of redrive's large
messages, for the interop tests.

    extended_client.py send QUEUE_URL BUCKET BODY_FILE         sends the file's text through S3; prints the message id
    extended_client.py send-legacy QUEUE_URL BUCKET BODY_FILE  the same, as the older clients wrote it
                                                               (SQSLargePayloadSize, MessageS3Pointer)
    extended_client.py sns-publish QUEUE_ARN BUCKET BODY_FILE  publishes the file's text through S3 with the SNS
                                                               Extended Client, to a topic the queue subscribes to
                                                               with raw delivery (made on the way)
    extended_client.py peek QUEUE_URL BUCKET                   receives up to 10 messages and leaves them
                                                               visible; prints [{"body": ..., "attributes":
                                                               {...}}, ...] as JSON

AWS_ENDPOINT_URL (moto, LocalStack), AWS_REGION and the credentials come from the environment.
"""
import json
import os
import sys

from sns_extended_client import SNSExtendedClientSession
from sqs_extended_client import SQSExtendedClientSession


REGION = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")


def client(bucket, legacy=False):
    sqs = SQSExtendedClientSession(region_name=REGION).client("sqs")
    sqs.large_payload_support = bucket
    sqs.use_legacy_attribute = legacy
    # Always through S3, whatever the size: the test decides the size, not the client's threshold.
    sqs.always_through_s3 = True
    return sqs


def send(queue_url, bucket, body_file, legacy=False):
    with open(body_file, encoding="utf-8") as body:
        sent = client(bucket, legacy).send_message(QueueUrl=queue_url, MessageBody=body.read())
    print(sent["MessageId"])


def send_legacy(queue_url, bucket, body_file):
    send(queue_url, bucket, body_file, legacy=True)


def sns_publish(queue_arn, bucket, body_file):
    sns = SNSExtendedClientSession(region_name=REGION).client("sns")
    sns.large_payload_support = bucket
    sns.always_through_s3 = True
    topic = sns.create_topic(Name=queue_arn.rsplit(":", 1)[1] + "-topic")["TopicArn"]
    sns.subscribe(
        TopicArn=topic,
        Protocol="sqs",
        Endpoint=queue_arn,
        Attributes={"RawMessageDelivery": "true"},
    )
    with open(body_file, encoding="utf-8") as body:
        published = sns.publish(TopicArn=topic, Message=body.read())
    print(published["MessageId"])


def peek(queue_url, bucket):
    messages = client(bucket).receive_message(
        QueueUrl=queue_url,
        MaxNumberOfMessages=10,
        WaitTimeSeconds=2,
        VisibilityTimeout=0,
        MessageAttributeNames=["All"],
    ).get("Messages", [])
    out = []
    for message in messages:
        attributes = {
            name: value.get("StringValue")
            for name, value in message.get("MessageAttributes", {}).items()
        }
        out.append({"body": message["Body"], "attributes": attributes})
    print(json.dumps(out))


if __name__ == "__main__":
    command, *arguments = sys.argv[1:]
    commands = {"send": send, "send-legacy": send_legacy, "sns-publish": sns_publish, "peek": peek}
    commands[command](*arguments)
