// A generic OData v4 client against sluice: Apache Olingo's odatajs (the
// ts-odatajs package) reads $metadata, then each entity set it finds there,
// a filtered query, a count and an entity by key. It prints one JSON
// document that odata/npmclient_test.go checks against the test data.
// Usage: node client.js <service root URL> <api key>
'use strict';
const odatajs = require('ts-odatajs');

const [root, key] = process.argv.slice(2);
if (!root || !key) {
  console.error('usage: node client.js <service root> <api key>');
  process.exit(2);
}
const headers = { 'x-api-key': key };

function read(requestUri, handler, metadata) {
  return new Promise((resolve, reject) => {
    odatajs.oData.read({ requestUri, headers }, (data, response) => resolve({ data, response }),
      (err) => reject(new Error(`${requestUri}: ${err.message} ${err.response ? err.response.statusCode + ' ' + err.response.body : ''}`)),
      handler, undefined, metadata);
  });
}

async function main() {
  const out = { sets: {}, rows: {}, filtered: null, count: null, entity: null };
  const { data: md } = await read(root + '/$metadata', odatajs.oData.metadataHandler);
  const schema = md.dataServices.schema[0];
  const container = schema.entityContainer;
  for (const set of container.entitySet) {
    const typeName = set.entityType.split('.').pop();
    const type = schema.entityType.find((t) => t.name === typeName);
    if (!type) throw new Error(`entity type ${set.entityType} of ${set.name} not in $metadata`);
    const keys = [].concat(type.key).flatMap((k) => [].concat(k.propertyRef));
    const restrictions = [].concat(set.annotation || []).find((a) => a.term === 'Capabilities.FilterRestrictions');
    const nonFilterable = restrictions
      ? [].concat(restrictions.record.propertyValue).filter((v) => v.property === 'NonFilterableProperties')
        .flatMap((v) => [].concat(v.collection.propertyPath || [])).map((p) => p.text)
      : null;
    out.sets[set.name] = {
      key: keys.map((p) => p.name),
      properties: type.property.map((p) => ({ name: p.name, type: p.type, nullable: p.nullable !== 'false' })),
      nonFilterable,
    };
    const { data } = await read(`${root}/${set.name}?$top=3`, undefined, md);
    out.rows[set.name] = data.value;
    if (data['@odata.context'] === undefined) throw new Error(`${set.name}: no @odata.context for an OData client`);
  }
  const filter = encodeURIComponent("CharacteristicName eq 'pH'");
  const f = await read(`${root}/Observations?$top=5&$select=Id,CharacteristicName&$filter=${filter}`, undefined, md);
  out.filtered = { rows: f.data.value, next: f.data['@odata.nextLink'] || null };
  const c = await read(`${root}/Observations/$count?$filter=${filter}`, odatajs.oData.handler.textHandler);
  out.count = String(c.data);
  const first = out.rows.Observations[0].Id;
  const e = await read(`${root}/Observations(${first})`, undefined, md);
  out.entity = e.data;
  process.stdout.write(JSON.stringify(out));
}

main().catch((err) => {
  console.error(err.stack || String(err));
  process.exit(1);
});
