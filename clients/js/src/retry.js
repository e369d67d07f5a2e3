// Waiting between tries: exponential backoff with full jitter, and a sleep
// that an AbortSignal ends.

/**
 * backoff is how long to wait before try attempt+1 (attempt counts from
 * 0): a uniformly random time up to min(maxMs, baseMs × 2^attempt) — "full
 * jitter", which spreads a crowd that failed together over the whole
 * window instead of bringing it back in waves.
 *
 * @param {() => number} random uniform in [0, 1)
 * @param {number} attempt
 * @param {number} baseMs
 * @param {number} maxMs
 */
export function backoff(random, attempt, baseMs, maxMs) {
  return Math.floor(random() * Math.min(maxMs, baseMs * Math.pow(2, Math.min(attempt, 30))));
}

/**
 * sleep resolves after ms, or rejects with the signal's reason once it
 * aborts.
 *
 * @param {number} ms
 * @param {AbortSignal} [signal]
 * @returns {Promise<void>}
 */
export function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal && signal.aborted) return reject(signal.reason);
    const done = () => { if (signal) signal.removeEventListener('abort', stop); resolve(); };
    const timer = setTimeout(done, ms);
    const stop = () => { clearTimeout(timer); reject(signal.reason); };
    if (signal) signal.addEventListener('abort', stop, { once: true });
  });
}
