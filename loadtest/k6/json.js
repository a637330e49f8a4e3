// k6: POST /json at a constant arrival rate, with thresholds.
//
//   k6 run -e SLUICE_HTTP_ADDR=127.0.0.1:8080 loadtest/k6/json.js
//   make k6            # starts sluice with loadtest/rules/loadtest.yaml
//
// Settings (-e NAME=value): RATE (requests/s, default 500), DURATION (30s),
// P99_MS (threshold on p99 latency, default 50), HOT_SHARE (fraction of
// requests for the one hot user, default 0.2).
//
// The rules give each "user" 50 requests a second: the hot user is refused
// (429, OVER_LIMIT) most of the time and the 1,000 others never, so a run
// shows both answers. 200 and 429 are both expected statuses; anything else
// counts in http_req_failed.
import http from 'k6/http';
import { check } from 'k6';
import { Counter } from 'k6/metrics';

const addr = __ENV.SLUICE_HTTP_ADDR || '127.0.0.1:8080';
const url = `http://${addr}/json`;
const rate = parseInt(__ENV.RATE || '500', 10);
const duration = __ENV.DURATION || '30s';
const p99 = parseFloat(__ENV.P99_MS || '50');
const hotShare = parseFloat(__ENV.HOT_SHARE || '0.2');

const overLimit = new Counter('sluice_over_limit');
const withinLimit = new Counter('sluice_ok');

http.setResponseCallback(http.expectedStatuses(200, 429));

export const options = {
  discardResponseBodies: false,
  scenarios: {
    json: {
      executor: 'constant-arrival-rate',
      rate: rate,
      timeUnit: '1s',
      duration: duration,
      preAllocatedVUs: 50,
      maxVUs: 200,
    },
  },
  thresholds: {
    // Only statuses other than 200 and 429 count as failures.
    http_req_failed: ['rate<0.001'],
    http_req_duration: [`p(99)<${p99}`],
    // Every answer must be a well-formed decision matching its status.
    checks: ['rate==1.0'],
    // The arrival rate is only constant if k6 keeps up: at most 1% dropped.
    dropped_iterations: [`rate<${rate * 0.01}`],
  },
};

export default function () {
  const user = Math.random() < hotShare ? 'hot' : `u${Math.floor(Math.random() * 1000)}`;
  const body = JSON.stringify({
    domain: 'loadtest',
    descriptors: [{ entries: [{ key: 'user', value: user }] }],
  });
  const res = http.post(url, body, { headers: { 'Content-Type': 'application/json' }, tags: { name: '/json' } });
  let code = '';
  try {
    code = res.json('overallCode');
  } catch (e) {
    code = '';
  }
  check(res, {
    'decision matches status': () =>
      (res.status === 200 && code === 'OK') || (res.status === 429 && code === 'OVER_LIMIT'),
  });
  if (res.status === 429) {
    overLimit.add(1);
  } else if (res.status === 200) {
    withinLimit.add(1);
  }
}
