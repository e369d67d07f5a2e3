// usher's proof of work, as an ES module: the solver of the gateway's
// /q/static/pow.js (gateway/page/web/pow.js) — the same SHA-256, the same
// search, the same smallest nonce — for the client, which must not need
// the gateway's script to be loaded first. test/pow.test.mjs holds the two
// to the same answers.
//
// The protocol (docs/api.md, "Proof of work at the door"): find the
// smallest decimal nonce such that SHA-256 of the ASCII string
// challenge + ":" + nonce begins with difficulty zero bits, and join with
// the header Usher-PoW: challenge:nonce.

var K = new Int32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);
var H0 = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];

// compress runs SHA-256 rounds from..63 of block W (W[0..15] set; the
// schedule is filled from 16) on state s (a..h, updated in place).
function compress(W, s, from) {
  var i, t1, t2, x, y;
  for (i = 16; i < 64; i++) {
    x = W[i - 15]; y = W[i - 2];
    W[i] = (((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3)) +
      W[i - 7] + (((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10)) + W[i - 16] | 0;
  }
  var a = s[0], b = s[1], c = s[2], d = s[3], e = s[4], f = s[5], g = s[6], h = s[7];
  for (i = from; i < 64; i++) {
    t1 = h + (((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7))) +
      ((e & f) ^ (~e & g)) + K[i] + W[i] | 0;
    t2 = (((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10))) +
      ((a & b) ^ (a & c) ^ (b & c)) | 0;
    h = g; g = f; f = e; e = d + t1 | 0; d = c; c = b; b = a; a = t1 + t2 | 0;
  }
  s[0] = a; s[1] = b; s[2] = c; s[3] = d; s[4] = e; s[5] = f; s[6] = g; s[7] = h;
}

// ascii returns s's character codes; the protocol's strings are ASCII.
function ascii(s) {
  var out = new Uint8Array(s.length);
  for (var i = 0; i < s.length; i++) out[i] = s.charCodeAt(i) & 0xff;
  return out;
}

// digest is SHA-256 of the bytes m, any length: the plain path, used
// for inputs too long for one block and by the tests.
function digest(m) {
  var n = m.length, blocks = ((n + 8) >> 6) + 1;
  var buf = new Uint8Array(blocks * 64);
  buf.set(m);
  buf[n] = 0x80;
  var bits = n * 8;
  buf[buf.length - 4] = bits >>> 24; buf[buf.length - 3] = bits >>> 16;
  buf[buf.length - 2] = bits >>> 8; buf[buf.length - 1] = bits;
  buf[buf.length - 5] = Math.floor(n / 0x20000000);
  var H = Int32Array.from(H0), W = new Int32Array(64), s = new Int32Array(8);
  for (var k = 0; k < blocks; k++) {
    for (var i = 0; i < 16; i++) {
      var o = k * 64 + i * 4;
      W[i] = (buf[o] << 24) | (buf[o + 1] << 16) | (buf[o + 2] << 8) | buf[o + 3];
    }
    s.set(H);
    compress(W, s, 0);
    for (var j = 0; j < 8; j++) H[j] = H[j] + s[j] | 0;
  }
  return H;
}

// zeroBits is the number of leading zero bits of the digest H.
function zeroBits(H) {
  var n = 0;
  for (var i = 0; i < 8; i++) {
    if (H[i] !== 0) return n + Math.clz32(H[i]);
    n += 32;
  }
  return n;
}

function hashHex(str) {
  var H = digest(ascii(str)), out = '';
  for (var i = 0; i < 8; i++) out += ('00000000' + (H[i] >>> 0).toString(16)).slice(-8);
  return out;
}

// solveRange tries nonces from, from+1, … (count of them). The message
// fits one block while challenge + ":" + nonce is at most 55 bytes (a
// 40-character challenge leaves 14 digits): the whole words of the fixed
// prefix are hashed once, and each try costs only the rounds after them.
function solveRange(challenge, difficulty, from, count) {
  if (!(difficulty >= 0 && difficulty <= 32)) throw new RangeError('difficulty must be 0..32');
  var prefix = ascii(challenge + ':');
  var p = prefix.length, end = from + count;
  var digits = String(from);
  if (p + String(end).length > 55) {
    // Beyond one block: the plain path.
    for (var n = from; n < end; n++) {
      if (zeroBits(digest(ascii(challenge + ':' + n))) >= difficulty) return n;
    }
    return -1;
  }
  var block = new Uint8Array(64);
  block.set(prefix);
  var fixed = p >> 2; // whole words of the prefix alone
  var W = new Int32Array(64), mid = new Int32Array(8), s = new Int32Array(8);
  for (var i = 0; i < fixed; i++) {
    W[i] = (block[4 * i] << 24) | (block[4 * i + 1] << 16) | (block[4 * i + 2] << 8) | block[4 * i + 3];
  }
  // The state after the rounds of the fixed words: rounds 0..fixed-1
  // read W[0..fixed-1] only.
  var W0 = new Int32Array(64);
  W0.set(W.subarray(0, fixed));
  mid.set(H0);
  roundsOnly(W0, mid, fixed);
  var d = ascii(digits), L = d.length;
  var mask = difficulty === 0 ? 0 : (difficulty >= 32 ? -1 : ~(-1 >>> difficulty));
  var lay = function () { // the digits, the 0x80 pad and the length, after a carry grew them
    block.fill(0, p, 64);
    block.set(d, p);
    block[p + L] = 0x80;
    var bits = (p + L) * 8;
    block[62] = bits >>> 8; block[63] = bits & 0xff;
    for (var w = fixed; w < 16; w++) {
      W[w] = (block[4 * w] << 24) | (block[4 * w + 1] << 16) | (block[4 * w + 2] << 8) | block[4 * w + 3];
    }
  };
  lay();
  for (var nonce = from; nonce < end; nonce++) {
    s.set(mid);
    compress(W, s, fixed);
    var h0 = H0[0] + s[0] | 0;
    if ((h0 & mask) === 0 && (difficulty < 32 || h0 === 0)) return nonce;
    // The next nonce, in place: usually only the last digit's word changes.
    var k = L - 1;
    while (k >= 0 && d[k] === 57) { d[k] = 48; k--; }
    if (k >= 0) {
      d[k]++;
      for (var j = k; j < L; j++) block[p + j] = d[j];
      for (var v = (p + k) >> 2; v <= (p + L - 1) >> 2; v++) {
        W[v] = (block[4 * v] << 24) | (block[4 * v + 1] << 16) | (block[4 * v + 2] << 8) | block[4 * v + 3];
      }
    } else {
      var grown = new Uint8Array(L + 1);
      grown[0] = 49; grown.fill(48, 1);
      d = grown; L++;
      if (p + L > 55) return solveRange(challenge, difficulty, nonce + 1, end - nonce - 1);
      lay();
    }
  }
  return -1;
}

// roundsOnly runs rounds 0..n-1 on s with W[0..n-1] (n <= 16: no
// schedule needed).
function roundsOnly(W, s, n) {
  var a = s[0], b = s[1], c = s[2], d = s[3], e = s[4], f = s[5], g = s[6], h = s[7], t1, t2;
  for (var i = 0; i < n; i++) {
    t1 = h + (((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7))) +
      ((e & f) ^ (~e & g)) + K[i] + W[i] | 0;
    t2 = (((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10))) +
      ((a & b) ^ (a & c) ^ (b & c)) | 0;
    h = g; g = f; f = e; e = d + t1 | 0; d = c; c = b; b = a; a = t1 + t2 | 0;
  }
  s[0] = a; s[1] = b; s[2] = c; s[3] = d; s[4] = e; s[5] = f; s[6] = g; s[7] = h;
}

const CHUNK = 1 << 15; // tries between yields to the event loop

/**
 * solve finds the smallest nonce that solves the challenge, in chunks that
 * yield to the event loop between them (a page stays responsive), or in a
 * Web Worker running the gateway's pow.js when `worker` names it.
 *
 * @param {string} challenge
 * @param {number} difficulty leading zero bits, 0..32
 * @param {{signal?: AbortSignal, onProgress?: (fraction: number, tried: number) => void, worker?: string | URL}} [opts]
 * @returns {Promise<string>} the nonce, as decimal digits
 */
export function solve(challenge, difficulty, opts = {}) {
  const progress = opts.onProgress || (() => {});
  const signal = opts.signal;
  const frac = (tried) => 1 - Math.exp(-tried / Math.pow(2, difficulty));
  if (opts.worker && typeof Worker !== 'undefined') return solveInWorker(challenge, difficulty, opts.worker, signal, progress, frac);
  return new Promise((resolve, reject) => {
    let from = 0;
    const step = () => {
      if (signal && signal.aborted) return reject(signal.reason);
      let n;
      try { n = solveRange(challenge, difficulty, from, CHUNK); } catch (err) { return reject(err); }
      if (n >= 0) { progress(1, n + 1); return resolve(String(n)); }
      from += CHUNK;
      progress(frac(from), from);
      setTimeout(step, 0);
    };
    step();
  });
}

// solveInWorker runs the gateway's pow.js as a classic Web Worker: it
// answers {challenge, difficulty} with {tried} as it goes and one {nonce}
// (or {error}) at the end.
function solveInWorker(challenge, difficulty, url, signal, progress, frac) {
  return new Promise((resolve, reject) => {
    const w = new Worker(url);
    const stop = (err) => { w.terminate(); reject(err); };
    if (signal) {
      if (signal.aborted) return stop(signal.reason);
      signal.addEventListener('abort', () => stop(signal.reason), { once: true });
    }
    w.onmessage = (e) => {
      if (e.data.nonce != null) { w.terminate(); progress(1, e.data.nonce + 1); resolve(String(e.data.nonce)); }
      else if (e.data.error) stop(new Error(e.data.error));
      else progress(frac(e.data.tried), e.data.tried);
    };
    w.onerror = (e) => { e.preventDefault(); stop(new Error('proof of work worker failed: ' + (e.message || 'error'))); };
    w.postMessage({ challenge, difficulty });
  });
}

/** header is the value of the Usher-PoW header for a solved challenge. */
export function header(challenge, nonce) { return challenge + ':' + nonce; }

export { solveRange, hashHex };
