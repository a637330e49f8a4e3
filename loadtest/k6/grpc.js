// k6: the gRPC RLS API (envoy.service.ratelimit.v3.RateLimitService) through
// k6's grpc module, with the protoset generated from the Go descriptors
// (go run ./loadtest/protoset), at a constant arrival rate.
//
//   k6 run -e SLUICE_GRPC_ADDR=127.0.0.1:8081 loadtest/k6/grpc.js
//   make k6
//
// Settings (-e NAME=value): RATE (calls/s, default 500), DURATION (30s),
// P99_MS (default 50), KEYS (distinct values, default 1000), DESCRIPTORS
// (per request, 1..3, default 3).
import grpc from 'k6/net/grpc';
import { check } from 'k6';

const addr = __ENV.SLUICE_GRPC_ADDR || '127.0.0.1:8081';
const rate = parseInt(__ENV.RATE || '500', 10);
const duration = __ENV.DURATION || '30s';
const p99 = parseFloat(__ENV.P99_MS || '50');
const keys = parseInt(__ENV.KEYS || '1000', 10);
const ndesc = Math.min(3, Math.max(1, parseInt(__ENV.DESCRIPTORS || '3', 10)));

const client = new grpc.Client();
// Resolved relative to this script.
client.loadProtoset('../ghz/rls.protoset');

export const options = {
  scenarios: {
    rls: {
      executor: 'constant-arrival-rate',
      rate: rate,
      timeUnit: '1s',
      duration: duration,
      preAllocatedVUs: 50,
      maxVUs: 200,
    },
  },
  thresholds: {
    grpc_req_duration: [`p(99)<${p99}`],
    checks: ['rate==1.0'],
    dropped_iterations: [`rate<${rate * 0.01}`],
  },
};

let connected = false;

export default function () {
  // One connection per VU, opened on its first iteration.
  if (!connected) {
    client.connect(addr, { plaintext: true, timeout: '5s' });
    connected = true;
  }
  const descriptors = [];
  for (let i = 0; i < ndesc; i++) {
    descriptors.push({ entries: [{ key: `k${i}`, value: `${Math.floor(Math.random() * keys)}` }] });
  }
  const res = client.invoke('envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit', {
    domain: 'loadtest',
    descriptors: descriptors,
  }, { timeout: '5s' });
  check(res, {
    'status is OK': (r) => r && r.status === grpc.StatusOK,
    'one status per descriptor, all OK': (r) =>
      r && r.message && r.message.overallCode === 'OK' && r.message.statuses.length === ndesc,
  });
}

export function teardown() {
  client.close();
}
