// Powertools for AWS Lambda (TypeScript) batch processing on the benchmark event: the same work as
// redrive's benchmark handler, timed in process from event bytes in to response bytes out, in both
// the synchronous and the asynchronous mode.
import { readFileSync } from 'node:fs';
import {
  BatchProcessor,
  BatchProcessorSync,
  EventType,
  processPartialResponse,
  processPartialResponseSync,
} from '@aws-lambda-powertools/batch';

const RUNS = 30;
const WARMUP = 5;
const raw = readFileSync(process.argv[2]);
const manifest = new URL('./node_modules/@aws-lambda-powertools/batch/package.json', import.meta.url);
const { version } = JSON.parse(readFileSync(manifest, 'utf8'));

const check = (record) => {
  const order = JSON.parse(record.body);
  if (order.status === 'fail') throw new Error('status is fail');
};

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function measure(name, once) {
  const samples = [];
  let failures = 0;
  for (let run = 0; run < RUNS + WARMUP; run++) {
    const started = performance.now();
    const response = await once();
    const elapsed = performance.now() - started;
    failures = response.batchItemFailures.length;
    if (run >= WARMUP) samples.push(elapsed);
  }
  return { name: `Powertools TypeScript ${version} ${name}`, median_ms: median(samples), failures };
}

const sync = new BatchProcessorSync(EventType.SQS);
const asyncProcessor = new BatchProcessor(EventType.SQS);
const results = [
  await measure('BatchProcessorSync', async () => {
    const event = JSON.parse(raw.toString('utf8'));
    const response = processPartialResponseSync(event, check, sync);
    Buffer.from(JSON.stringify(response));
    return response;
  }),
  await measure('BatchProcessor (async)', async () => {
    const event = JSON.parse(raw.toString('utf8'));
    const response = await processPartialResponse(event, async (record) => check(record), asyncProcessor);
    Buffer.from(JSON.stringify(response));
    return response;
  }),
];
console.log(JSON.stringify(results));
