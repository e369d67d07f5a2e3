// The client's solver is the gateway's (gateway/page/web/pow.js): the same
// smallest nonce for every challenge, the documented answers, and it stops
// when told to.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';

import { solveChallenge } from '@usher/client';
import { hashHex, header, solveRange } from '../src/pow.js';

const gatewayPow = createRequire(import.meta.url)('../../../gateway/page/web/pow.js');

test('the documented answers (docs/api.md, "Proof of work at the door")', async () => {
  assert.equal(await solveChallenge('AQ8AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', 8), '449');
  assert.equal(await solveChallenge('ARNrDJmmx2CevWKhErwq7Uo95MHupz-WcwfAXAxa', 19), '1232975');
  assert.equal(header('c', '7'), 'c:7');
});

test('the same nonces as the gateway\'s pow.js, and SHA-256 as node:crypto', () => {
  for (let i = 0; i < 40; i++) {
    const challenge = createHash('sha256').update(String(i)).digest('base64url').slice(0, 40);
    const d = i % 13;
    assert.equal(solveRange(challenge, d, 0, 1e7), gatewayPow.solveRange(challenge, d, 0, 1e7), `challenge ${challenge} d=${d}`);
  }
  for (const n of [0, 3, 55, 56, 64, 200]) {
    const s = 'usher'.repeat(40).slice(0, n);
    assert.equal(hashHex(s), createHash('sha256').update(s).digest('hex'), `${n} bytes`);
  }
});

test('solving stops when the signal aborts', async () => {
  const ac = new AbortController();
  setTimeout(() => ac.abort(), 50);
  await assert.rejects(solveChallenge('AQ8AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', 32, { signal: ac.signal }), { name: 'AbortError' });
});
