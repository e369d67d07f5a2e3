// The package is publishable as it stands: its entry point resolves by
// name, every export is typed in the hand-written usher.d.ts (and nothing
// typed is missing), and package.json names no runtime dependency.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';

import * as usher from '@usher/client';

const read = (p) => readFile(new URL(p, import.meta.url), 'utf8');

test('every export is typed in usher.d.ts, and every typed value exported', async () => {
  const dts = await read('../src/usher.d.ts');
  const typed = [...dts.matchAll(/^export (?:declare )?(?:function|class|const) (\w+)/gm)].map((m) => m[1]).sort();
  assert.deepEqual(Object.keys(usher).sort(), typed);
});

test('package.json: an ES module with types, its files, no dependencies', async () => {
  const pkg = JSON.parse(await read('../package.json'));
  assert.equal(pkg.name, '@usher/client');
  assert.equal(pkg.type, 'module');
  assert.equal(pkg.exports['.'].default, './src/usher.js');
  assert.equal(pkg.exports['.'].types, './src/usher.d.ts');
  assert.equal(pkg.types, './src/usher.d.ts');
  assert.ok(pkg.files.includes('src/'));
  assert.ok(pkg.license);
  assert.equal(pkg.dependencies, undefined);
});

test('a client outside a browser needs the gateway\'s URL, and cannot enter a page', async () => {
  assert.throws(() => usher.createClient(), TypeError);
  assert.equal(usher.createClient({ base: 'http://gw/' }).passURL({ ticket: 't 1' }, 'https://shop.example/drop?x=1'),
    'http://gw/v1/gate/pass?ticket=t%201&return=https%3A%2F%2Fshop.example%2Fdrop%3Fx%3D1');
  assert.equal(usher.acceptLanguage(['de-AT', 'de', 'en']), 'de-AT, de;q=0.9, en;q=0.8');
  await assert.rejects(usher.createClient({ base: 'http://gw' }).enter({ ticket: 't' }, 'https://shop.example/'), TypeError);
});
