import { createClient } from '@usher/client';

// Join the line, show the place as it changes, order with the entry token.
export async function buy({ base, user, queue, sku }, show = console.log) {
  const usher = createClient({ base, headers: { 'X-User-Id': user } });
  for await (const s of usher.follow(queue)) {
    show(s.status === 'WAITING' ? `#${s.position} of ${s.waiting}` : s.status);
    if (s.status === 'READY') return usher.order({ token: s.token, sku });
  }
}
