// Calls sluice's gRPC server with gRPC's JavaScript client (@grpc/grpc-js),
// for transport/grpcjs_test.go. Messages go as raw bytes: the test encodes
// the requests and decodes the answers, so no .proto is needed here.
//
//   node client.js SPEC
//
// SPEC is JSON: {"target": "127.0.0.1:PORT", "ca": PEM or absent for
// plaintext, "calls": [{"name", "method", "request" (base64),
// "stream": bool (read one message of a server stream), "gzip": bool,
// "deadlineMs": number or absent}]}. The calls run one after another on
// one channel per kind (plain, gzip); the results go to stdout as JSON,
// one {"name", "code", "details", "messages" (base64)} per call.
'use strict';
const grpc = require('@grpc/grpc-js');

const spec = JSON.parse(process.argv[2]);
const creds = spec.ca
  ? grpc.credentials.createSsl(Buffer.from(spec.ca))
  : grpc.credentials.createInsecure();
const raw = (b) => b;
const clients = {
  plain: new grpc.Client(spec.target, creds),
  // 2 is gzip (grpc-js's CompressionAlgorithms).
  gzip: new grpc.Client(spec.target, creds, { 'grpc.default_compression_algorithm': 2 }),
};

function options(c) {
  return c.deadlineMs === undefined ? {} : { deadline: new Date(Date.now() + c.deadlineMs) };
}

function call(c) {
  const client = c.gzip ? clients.gzip : clients.plain;
  const req = Buffer.from(c.request, 'base64');
  return new Promise((resolve) => {
    const result = { name: c.name, code: 0, details: '', messages: [] };
    if (!c.stream) {
      client.makeUnaryRequest(c.method, raw, raw, req, new grpc.Metadata(), options(c), (err, resp) => {
        if (err) {
          result.code = err.code;
          result.details = err.details;
        } else {
          result.messages.push(resp.toString('base64'));
        }
        resolve(result);
      });
      return;
    }
    const s = client.makeServerStreamRequest(c.method, raw, raw, req, new grpc.Metadata(), options(c));
    s.on('data', (m) => {
      result.messages.push(m.toString('base64'));
      s.cancel(); // one message is all the test asks for
    });
    s.on('error', (err) => {
      if (err.code !== grpc.status.CANCELLED || result.messages.length === 0) {
        result.code = err.code;
        result.details = err.details;
      }
      resolve(result);
    });
    s.on('end', () => resolve(result));
  });
}

(async () => {
  const results = [];
  for (const c of spec.calls) {
    results.push(await call(c));
  }
  clients.plain.close();
  clients.gzip.close();
  process.stdout.write(JSON.stringify(results));
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
