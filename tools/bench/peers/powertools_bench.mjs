// Powertools for AWS Lambda (TypeScript) batch processing on the benchmark event: the same work as
// redrive's benchmark handler, timed in process from event bytes in to response bytes out, in both
// the synchronous and the asynchronous mode.
//
// Each line read from stdin is a number of runs to make back to back in each mode; each mode's
// median is printed, both on one JSON line. redrive-bench runs ours right before and right after,
// so that a ratio compares runs a second apart at most.
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import {
  BatchProcessor,
  BatchProcessorSync,
  EventType,
  processPartialResponse,
  processPartialResponseSync,
} from '@aws-lambda-powertools/batch';

const raw = readFileSync(process.argv[2]);
const manifest = new URL('./node_modules/@aws-lambda-powertools/batch/package.json', import.meta.url);
const { version } = JSON.parse(readFileSync(manifest, 'utf8'));

const check = (record) => {
  const order = JSON.parse(record.body);
  if (order.status === 'fail') throw new Error('status is fail');
};

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function timed(name, runs, once) {
  const samples = [];
  let failures = 0;
  for (let run = 0; run < runs; run++) {
    const started = performance.now();
    const response = await once();
    samples.push(performance.now() - started);
    failures = response.batchItemFailures.length;
  }
  return { name: `Powertools TypeScript ${version} ${name}`, ms: median(samples), failures };
}

const sync = new BatchProcessorSync(EventType.SQS);
const asyncProcessor = new BatchProcessor(EventType.SQS);
for await (const line of createInterface({ input: process.stdin })) {
  const runs = Number(line);
  const results = [
    await timed('BatchProcessorSync', runs, async () => {
      const event = JSON.parse(raw.toString('utf8'));
      const response = processPartialResponseSync(event, check, sync);
      Buffer.from(JSON.stringify(response));
      return response;
    }),
    await timed('BatchProcessor (async)', runs, async () => {
      const event = JSON.parse(raw.toString('utf8'));
      const response = await processPartialResponse(event, async (record) => check(record), asyncProcessor);
      Buffer.from(JSON.stringify(response));
      return response;
    }),
  ];
  console.log(JSON.stringify(results));
}
