// Counting with two generic OData v4 libraries from npm, as their users
// do: @odata/client's EntitySet.count() (GET ?$top=1&$count=true, reading
// @odata.count) and o.js (npm "odata"): query({$count:true}) for rows and
// @odata.count, and the /$count path. Prints one JSON document that
// odata/npmclient_test.go checks against the database.
// Usage: node counts.js <service root URL> <api key> <cases JSON>
// where cases is [{"set":"Observations","field":"CharacteristicName","literal":"'pH'"}, ...]
// (field "" for no filter).
'use strict';
const { OData } = require('@odata/client');
const { o } = require('odata');

const [root, key, casesJSON] = process.argv.slice(2);
if (!root || !key || !casesJSON) {
  console.error('usage: node counts.js <service root> <api key> <cases JSON>');
  process.exit(2);
}

async function main() {
  const client = OData.New4({ serviceEndpoint: root + '/', commonHeaders: { 'x-api-key': key } });
  // o.js's own default headers (Content-Type: application/json) with the key.
  const ojs = (fragment) => o(root + '/', {
    headers: new Headers({ 'Content-Type': 'application/json', 'x-api-key': key }),
    fragment,
  });
  const out = [];
  for (const c of JSON.parse(casesJSON)) {
    const es = client.getEntitySet(c.set);
    let filter;
    const q = { $count: true, $top: 1 };
    if (c.field) {
      filter = es.newFilter().field(c.field).eq(c.literal);
      q.$filter = `${c.field} eq ${c.literal}`;
    }
    const odataClient = await es.count(filter);
    const rows = await ojs('value').get(c.set).query(q);
    const whole = await ojs('').get(c.set).query(q);
    const path = await ojs('value').get(`${c.set}/$count`).query(c.field ? { $filter: q.$filter } : undefined);
    out.push({
      set: c.set,
      field: c.field,
      odataClient,
      ojsRows: Array.isArray(rows) ? rows.length : typeof rows,
      ojsCount: whole['@odata.count'],
      ojsPath: path,
    });
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((err) => {
  console.error(err && err.stack ? err.stack : err);
  process.exit(1);
});
