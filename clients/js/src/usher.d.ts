// Types of @usher/client (src/usher.js), written by hand so that neither
// testing nor publishing needs a TypeScript build. The shapes are the
// gateway's answers as api/openapi.yaml documents them.

/** Where a ticket stands. EXPIRED, USED, LEFT and CLOSED end it. */
export type Status = 'PRE_QUEUE' | 'WAITING' | 'READY' | 'EXPIRED' | 'USED' | 'LEFT' | 'CLOSED';

/** What the operators tell the line. */
export interface Notice {
  message: string;
  level: 'info' | 'warning';
  since: string;
}

/** A ticket's state: a join's or a poll's answer, or a stream's news merged into it. */
export interface TicketState {
  ticket: string;
  queue: string;
  status: Status;
  /** WAITING: the place in line, 1-based. */
  position?: number;
  /** How many wait in line, this shopper counted (absent once CLOSED). */
  waiting?: number;
  /** WAITING: from the measured admission rate; absent until it is known. */
  etaSeconds?: number;
  /** When to poll next, were the stream down. */
  pollAfterMs?: number;
  /** The notifier's event stream of this ticket. */
  events?: string;
  /** READY: the entry token (an EdDSA JWT), for POST /v1/orders or the shop's own checkout. */
  token?: string;
  readyAt?: string;
  expiresAt?: string;
  /** PRE_QUEUE: when the drop opens and the lottery places the pre-queue. */
  opensAt?: string;
  /** CLOSED: closed, sold_out, ended; LEFT: abandoned. */
  reason?: string;
  stock?: 'available' | 'held' | 'sold_out';
  skusAvailable?: string[];
  notice?: Notice;
  /** Which told it: the join's answer, the stream, or a poll. */
  via: 'join' | 'stream' | 'poll';
}

/** A ticket, as follow, poll, leave and passURL need it. */
export interface TicketRef {
  queue: string;
  ticket: string;
}

export interface RetryInfo {
  /** 0 for the first retry. */
  attempt: number;
  delayMs: number;
  method: string;
  url: string;
  /** 429 or 503; absent when the gateway could not be reached. */
  status?: number;
  /** What Retry-After said (0: nothing); delayMs is never less. */
  retryAfterMs: number;
  error?: unknown;
}

export interface RetryOptions {
  /** Tries after the first, for a call the gateway turned away (429, 503) or that did not reach it. Default 8. */
  attempts?: number;
  /** The backoff's first window, doubled each try (full jitter). Default 500. */
  baseMs?: number;
  /** The backoff's largest window. Default 30000. */
  maxMs?: number;
  /** Told before each wait: a page can say "busy, trying again in 2 s". */
  onRetry?: (info: RetryInfo) => void;
}

export type HeaderMap = Record<string, string>;

export interface ClientOptions {
  /** The gateway's URL; default (in a browser only) the page's origin. */
  base?: string;
  /** Who the shopper is: X-User-Id (behind the shop's proxy) or X-User-Token (the shop's user JWT); a function is asked before each call. */
  headers?: HeaderMap | (() => HeaderMap | Promise<HeaderMap>);
  /** Language tags, most wanted first, sent as Accept-Language and used by pageURL; default in a browser the page's <html lang>, then navigator.languages. */
  languages?: readonly string[];
  /** The fetch to use; default globalThis.fetch. */
  fetch?: typeof fetch;
  /** How to follow the stream: 'auto' (EventSource where there is one, else fetch), 'eventsource', 'fetch', or false (polls only). */
  stream?: 'auto' | 'eventsource' | 'fetch' | false;
  /** A fetch stream silent this long (heartbeats come every 15 s) is taken for dead and reopened. Default 45000. */
  streamIdleMs?: number;
  retry?: RetryOptions;
  /** Uniform in [0, 1): the jitter's source. Default Math.random. */
  random?: () => number;
  /** The URL of the gateway's /q/static/pow.js, to solve in a Web Worker; default on the calling thread, in slices. */
  powWorker?: string | URL;
}

export interface JoinOptions {
  signal?: AbortSignal;
  /** A single-use invite code (Usher-Invite). */
  invite?: string;
  /** The proof of work's progress: fraction is the chance it would have finished by now. */
  onProgress?: (fraction: number, tried: number) => void;
}

export interface FollowOptions extends JoinOptions {
  /** Follow this ticket (kept from an earlier visit) instead of joining. */
  ticket?: string;
}

export interface WaitOptions extends FollowOptions {
  /** Every state on the way, READY or the ending included. */
  onUpdate?: (state: TicketState) => void;
}

export interface OrderOptions {
  /** The entry token of a READY state. */
  token: string;
  sku: string;
  /** Default 1. */
  quantity?: number;
  signal?: AbortSignal;
}

export interface Order {
  orderId: string;
  status: 'PENDING' | 'PAID' | 'FAILED' | 'REJECTED';
  reason?: string;
  sku?: string;
  quantity?: number;
  paymentId?: string;
}

export interface Client {
  /** One join (with the proof of work if asked): the place, or an UsherError. */
  join(queue: string, options?: JoinOptions): Promise<TicketState>;
  /** One poll of a ticket. */
  poll(ticket: TicketRef, options?: { signal?: AbortSignal }): Promise<TicketState>;
  /**
   * The ticket's states, from the join's answer on: stream, polls while it
   * is down, a new join when the line was reset. Ends after EXPIRED, USED,
   * LEFT or CLOSED; leaving the loop (or the signal) closes the stream. An
   * abort throws the signal's reason.
   */
  follow(queue: string, options?: FollowOptions): AsyncGenerator<TicketState, void, undefined>;
  /** follow until READY with the token; an ending rejects with an UsherError (status EXPIRED, USED, LEFT or CLOSED). */
  wait(queue: string, options?: WaitOptions): Promise<TicketState>;
  /** Leave the line, or free an admitted shopper's slot. */
  leave(ticket: TicketRef, options?: { signal?: AbortSignal }): Promise<void>;
  /** Order with the entry token and follow the order until it is final. */
  order(options: OrderOptions): Promise<Order>;
  /** The proxy gate's pass URL for a READY ticket, then on to returnTo (default, in a browser, this page); the ticket rides in its query. */
  passURL(ticket: Pick<TicketRef, 'ticket'>, returnTo?: string | URL): string;
  /**
   * In a browser: post the ticket and returnTo to the gate's pass (a form body, with the
   * identity headers: the ticket stays out of URLs), keep the pass cookie, and go to
   * returnTo. A refusal rejects with an UsherError and the page stays.
   */
  enter(ticket: Pick<TicketRef, 'ticket'>, returnTo?: string | URL, options?: { signal?: AbortSignal }): Promise<void>;
  /** The queue's waiting-room page, in the first of the client's languages. */
  pageURL(queue: string): string;
}

/** A refused call, or a ticket that ended without READY. */
export class UsherError extends Error {
  /** The HTTP status (0: usher could not be reached), or the ticket's ending. */
  status: number | 'EXPIRED' | 'USED' | 'LEFT' | 'CLOSED';
  /** The problem type's last segment: queue-closed, rate-limited, challenge-required… */
  type?: string;
  reason?: string;
  /** The RFC 9457 problem document. */
  problem?: Record<string, unknown>;
  /** The ending state, for an ending. */
  state?: TicketState;
  retryAfterMs: number;
}

export function createClient(options?: ClientOptions): Client;

/** Solve a proof-of-work challenge (docs/api.md, "Proof of work at the door"): the nonce, as digits. */
export function solveChallenge(
  challenge: string,
  difficulty: number,
  options?: { signal?: AbortSignal; onProgress?: (fraction: number, tried: number) => void; worker?: string | URL },
): Promise<string>;

/** An Accept-Language value for tags, most wanted first: "de-AT, de;q=0.9, en;q=0.8". */
export function acceptLanguage(tags: readonly string[]): string;
