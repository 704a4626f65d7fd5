// Powertools for AWS Lambda (TypeScript) on I/O-bound work: each record's handler parses the body,
// awaits a downstream that answers after `latency` ms, and fails when the order's status is `fail`.
// Standard queues: `BatchProcessor` (records in parallel, its default). FIFO: the async
// `SqsFifoPartialProcessorAsync` (records one after the other, as it must keep the groups' order).
//
// Usage: node powertools_io.mjs EVENT LATENCY_MS standard|fifo. Each line read from stdin is a
// number of runs to make back to back; their median is printed on one JSON line.
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import {
  BatchProcessor,
  EventType,
  SqsFifoPartialProcessorAsync,
  processPartialResponse,
} from '@aws-lambda-powertools/batch';

const [eventPath, latencyText, mode] = process.argv.slice(2);
const raw = readFileSync(eventPath);
const latency = Number(latencyText);
const manifest = new URL('./node_modules/@aws-lambda-powertools/batch/package.json', import.meta.url);
const { version } = JSON.parse(readFileSync(manifest, 'utf8'));

const downstream = () => new Promise((resolve) => setTimeout(resolve, latency));
const handler = async (record) => {
  const order = JSON.parse(record.body);
  await downstream();
  if (order.status === 'fail') throw new Error('status is fail');
};
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const [name, processor] =
  mode === 'fifo'
    ? ['SqsFifoPartialProcessorAsync', new SqsFifoPartialProcessorAsync()]
    : ['BatchProcessor (parallel)', new BatchProcessor(EventType.SQS)];

for await (const line of createInterface({ input: process.stdin })) {
  const samples = [];
  let failures = 0;
  for (let run = 0; run < Number(line); run++) {
    const started = performance.now();
    const event = JSON.parse(raw.toString('utf8'));
    const response = await processPartialResponse(event, handler, processor);
    Buffer.from(JSON.stringify(response));
    samples.push(performance.now() - started);
    failures = response.batchItemFailures.length;
  }
  console.log(JSON.stringify([{ name: `Powertools TypeScript ${version} ${name}`, ms: median(samples), failures }]));
}
