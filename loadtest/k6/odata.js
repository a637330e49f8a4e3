// k6: the OData API as a well-behaved client uses it. Each VU is one API
// key; it sends one request at a time, at most 2 a second (the documented
// client rule), follows @odata.nextLink until a walk ends, and counts the
// 429s it still meets (honouring Retry-After before retrying the same URL).
//
//   k6 run -e ODATA_URL=http://127.0.0.1:8000/v1/odata/v4 -e ODATA_KEYS=key1,key2 loadtest/k6/odata.js
//
// To load the server, not the per-key limit (2 requests/s, one in flight),
// use many keys: one VU per key. bin/loadtest/with-odata -keys 50 -- … starts
// a server with 50 keys and passes them in ODATA_KEYS; several VUs on one
// key mostly get 429s (docs/benchmarks.md, "The OData API: many keys").
//
// Settings (-e NAME=value):
//   ODATA_URL     service root, default http://127.0.0.1:8000/v1/odata/v4
//   ODATA_KEYS    comma-separated API keys, one VU per key (required)
//   COLLECTION    default Observations
//   SELECT        $select, default Id,DOI,CharacteristicName,ResultValue,ResultUnit
//   FILTER        $filter, default none
//   TOP           $top, default 1000
//   MAX_PAGES     pages per walk before starting over, default 20
//   PACE_MS       least time between two request starts of one key, default 500
//   DURATION      default 60s
//   MAX_429_RATE  threshold on the share of 429 answers, default 0.01
//
// Written against the documented API (docs/odata.md, "What it serves"):
// x-api-key header, JSON pages with "value" and "@odata.nextLink" (absolute,
// carrying every query option), 429 with Retry-After.
import http from 'k6/http';
import { check, sleep, fail } from 'k6';
import { Counter, Rate, Trend } from 'k6/metrics';
import exec from 'k6/execution';

const root = (__ENV.ODATA_URL || 'http://127.0.0.1:8000/v1/odata/v4').replace(/\/$/, '');
const keys = (__ENV.ODATA_KEYS || '').split(',').map((k) => k.trim()).filter((k) => k !== '');
const collection = __ENV.COLLECTION || 'Observations';
const select = __ENV.SELECT || 'Id,DOI,CharacteristicName,ResultValue,ResultUnit';
const filter = __ENV.FILTER || '';
const top = parseInt(__ENV.TOP || '1000', 10);
const maxPages = parseInt(__ENV.MAX_PAGES || '20', 10);
const paceMs = parseInt(__ENV.PACE_MS || '500', 10);
const duration = __ENV.DURATION || '60s';
const max429 = parseFloat(__ENV.MAX_429_RATE || '0.01');

const tooMany = new Counter('odata_429');
const tooManyRate = new Rate('odata_429_rate');
const rows = new Counter('odata_rows');
const pages = new Counter('odata_pages');
const walks = new Counter('odata_walks_completed');
const pageRows = new Trend('odata_rows_per_page');

if (keys.length === 0) {
  fail('set ODATA_KEYS to one or more API keys (comma-separated)');
}

// 429 is an expected answer here (it is counted, not a failure).
http.setResponseCallback(http.expectedStatuses(200, 429));

export const options = {
  scenarios: {
    clients: {
      executor: 'constant-vus',
      vus: keys.length,
      duration: duration,
      gracefulStop: '30s',
    },
  },
  thresholds: {
    http_req_failed: ['rate<0.001'],
    checks: ['rate==1.0'],
    odata_429_rate: [`rate<${max429}`],
    odata_pages: ['count>0'],
  },
};

function firstURL() {
  const q = [`%24top=${top}`];
  if (select) q.push(`%24select=${encodeURIComponent(select)}`);
  if (filter) q.push(`%24filter=${encodeURIComponent(filter)}`);
  return `${root}/${collection}?${q.join('&')}`;
}

// One request per pace interval per key: the VU sleeps off what is left of
// the interval since its previous request started.
let lastStart = 0;
function paced(url, key) {
  const wait = lastStart + paceMs - Date.now();
  if (wait > 0) sleep(wait / 1000);
  lastStart = Date.now();
  return http.get(url, {
    headers: { 'x-api-key': key, Accept: 'application/json' },
    tags: { name: `/${collection}` },
    timeout: '60s',
  });
}

export default function () {
  const key = keys[(exec.vu.idInTest - 1) % keys.length];
  let url = firstURL();
  for (let page = 0; page < maxPages && url; page++) {
    let res = paced(url, key);
    for (let retry = 0; res.status === 429 && retry < 5; retry++) {
      tooMany.add(1);
      tooManyRate.add(1);
      const after = parseFloat(res.headers['Retry-After'] || '1');
      sleep(Math.max(after, paceMs / 1000));
      res = paced(url, key);
    }
    if (res.status === 429) {
      tooMany.add(1);
      tooManyRate.add(1);
      return;
    }
    tooManyRate.add(0);
    tooMany.add(0); // so the count shows even when it stays 0
    let body = null;
    try {
      body = res.json();
    } catch (e) {
      body = null;
    }
    const ok = check(res, {
      'status 200': (r) => r.status === 200,
      'JSON page with a value array': () => body !== null && Array.isArray(body.value),
      'next link in body and Link header agree': () => {
        const link = res.headers['Link'] || '';
        const next = body && body['@odata.nextLink'];
        return next ? link.indexOf(`<${next}>`) === 0 : link === '';
      },
    });
    if (!ok) return;
    pages.add(1);
    rows.add(body.value.length);
    pageRows.add(body.value.length);
    url = body['@odata.nextLink'] || '';
    if (!url) walks.add(1);
  }
}
