package waitqueue

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/keyspace"
	"usher/internal/script"
)

// Queues that sell the same SKU share its units. A stock-aware line never
// admits an unordered shopper beyond the units that could still be sold,
// and "could still be sold" counts every queue that sells the SKU: the
// shoppers each one admitted who have not ordered (one unit each, of any
// SKU of their queue) and the orders each one claimed that the store has
// not placed yet.
//
// Each queue's keys share the hash tag {q}, so on a Redis Cluster two
// queues' lines may live on different nodes, and no one script can read
// both. What they share lives in the stock ledger instead (keys under
// keyspace.StockLedger: one hash tag, one node), and every stock-aware
// admission step takes three calls:
//
//  1. reserve, on the ledger: what every other queue sharing the SKUs
//     holds — as its last report said, plus the units reserved for its
//     admission steps on the way — and a grant of units for this step,
//     reserved at once so that no other queue counts them as free;
//  2. the step itself, on the queue's node (admitScript, admitNowScript):
//     its own holdings read there and then (a claim made a moment ago
//     counts), the others' from the ledger, capped by the grant; it
//     records that it used the reservation and returns a snapshot of what
//     the line holds after it;
//  3. report, on the ledger: the snapshot replaces the queue's record, and
//     every reservation the line had used by then is released (the
//     snapshot counts its admissions).
//
// A crash between the calls leaves a reservation the ledger still counts:
// fewer units for a moment, never more; the queue's next report (its next
// tick) releases it. A reservation older than one the line has used is
// refused by the line (the ledger may have released its units with that
// newer step's report), so no admission ever rests on a released grant.
// A queue named as a peer that has never reported blocks the grant — what
// it holds is unknown — until it does (its first tick).
//
// A claim of several units counts on the queue's own node at once; for
// the other queues it counts from that queue's next report: the claim's
// own, made right after it (see Store.Claim). The store's figures reach
// the ledger with every report and every SetStock (the admitter's refresh,
// a restock, the order worker's report).
//
// The ledger's node is one for every stock-aware queue: while it cannot be
// reached, their ticks fail and they admit nobody, as while their own node
// cannot be. Figures travel between the scripts as JSON numbers (Redis's
// cjson: exact below 10^14; units are at most 10^12, versions and ids
// count from 1).

// Share names what a stock-aware queue shares its units with.
type Share struct {
	// SKUs are the SKUs the queue sells. Without them the line counts its
	// own holdings alone, and reports nothing to the ledger.
	SKUs []string
	// Peers are the other stock-aware queues that sell any of the SKUs,
	// as the catalog says (see catalog.StockPeers). The ledger also counts
	// any queue that reported one of the SKUs in the last two of its ticks
	// and a second, so a queue this caller's catalog has not seen yet
	// counts all the same.
	Peers []string
}

// reservation is the ledger's answer to reserve (reserveScript), handed to
// the line's admission step as it is.
type reservation struct {
	// Res is the reservation's id (counting up per queue) and Grant the
	// units reserved for the step: it admits no more.
	Res   int64 `json:"res"`
	Grant int64 `json:"grant"`
	// Admitted is what the other queues' unordered shoppers hold (one unit
	// each), their reservations on the way included; Busy everything they
	// hold or have pending of the SKUs (units that may come back).
	Admitted int64 `json:"admitted"`
	Busy     int64 `json:"busy"`
	// SKUs: each SKU's units in the store as the ledger knows them (the
	// latest version any queue reported) and what the other queues'
	// claims hold of it.
	SKUs map[string]ledgerSKU `json:"skus"`
}

type ledgerSKU struct {
	Avail   *int64 `json:"avail,omitempty"` // nil: no queue reported a figure yet
	Ver     int64  `json:"ver"`
	Claimed int64  `json:"claimed"`
}

// snapshot is what a line holds of its stock after an admission step,
// reported to the ledger (reportScript).
type snapshot struct {
	// Ver counts the line's snapshots, Res is the last reservation the
	// line used: together they order snapshots (a later one has the
	// higher Res, or the same and the higher Ver).
	Ver      int64              `json:"ver"`
	Res      int64              `json:"res"`
	Admitted int64              `json:"admitted"` // unordered shoppers, one unit each
	Waiting  int64              `json:"waiting"`
	SKUs     map[string]lineSKU `json:"skus"`
}

type lineSKU struct {
	Avail   *int64 `json:"avail,omitempty"`
	Ver     int64  `json:"ver"`
	Claimed int64  `json:"claimed"` // ordered, not placed by the store yet
	Placed  int64  `json:"placed"`  // placed, not final yet
}

// stockLua is the stock-aware line's count of what could still be sold,
// one function for the tick and the admission at once, so both count
// alike at the moment they admit. It follows luaLib.
//
// ownStock() reads the line's own holdings: each SKU's units as the store
// last reported them (P..'stock'), and what each slot holds (HELD, see
// syncHeld): {known (any SKU has a figure), admitted (unordered shoppers,
// a unit each), pending (placed orders, not final), skus = {sku = {avail,
// ver, claimed, placed}}}.
//
// sellableOf(own, share) is what could still go to the next in line: the
// SKUs' units, less what this line holds and — share being the ledger's
// figures of the queues it shares its SKUs with (see stockshare.go; nil:
// this queue alone) — what those hold. Each SKU's figure is the later of
// the line's and the ledger's. Returns the units, whether anything is
// held or pending anywhere (units that may come back), and the SKUs with
// units left, sorted, with each one's figures for ops
// ('sku:available:claimed:pending', this line's claims and placements).
const stockLua = `
local function ownStock()
  local own = {known = false, admitted = 0, pending = 0, skus = {}}
  local function sku(name)
    if not own.skus[name] then own.skus[name] = {ver = 0, claimed = 0, placed = 0} end
    return own.skus[name]
  end
  local rows = redis.call('HGETALL', P .. 'stock')
  for i = 1, #rows, 2 do
    if string.sub(rows[i], -2) == ':v' then
      sku(string.sub(rows[i], 1, -3)).ver = tonumber(rows[i + 1])
    else
      sku(rows[i]).avail = tonumber(rows[i + 1])
      own.known = true
    end
  end
  if redis.call('HLEN', HELD) ~= redis.call('ZCARD', A) then
    -- Slots taken before HELD existed (or lost with it): from the records.
    local slot = {}
    for _, s in ipairs(redis.call('ZRANGE', A, 0, -1)) do
      syncHeld(s)
      slot[s] = true
    end
    for _, s in ipairs(redis.call('HKEYS', HELD)) do
      if not slot[s] then redis.call('HDEL', HELD, s) end
    end
  end
  for _, v in ipairs(redis.call('HVALS', HELD)) do
    if v == 'a' then
      own.admitted = own.admitted + 1
    elseif v ~= 'x' then
      local kind, qty, name = string.match(v, '^(%a):([^:]*):(.*)$')
      qty = tonumber(qty)
      if kind == 'p' then
        own.pending = own.pending + 1
        sku(name).placed = sku(name).placed + qty
      else
        sku(name).claimed = sku(name).claimed + qty
      end
    end
  end
  return own
end
local function sellableOf(own, share)
  local units, busy = 0, own.admitted + own.pending
  local left, figures = {}, {}
  for name, s in pairs(own.skus) do
    local avail, claimed = s.avail, s.claimed
    local other = share and share.skus[name]
    if other then
      if other.avail and (not avail or other.ver > s.ver) then avail = other.avail end
      claimed = claimed + other.claimed
    end
    units = units - claimed
    busy = busy + s.claimed
    if avail then
      units = units + avail
      if avail - claimed > 0 then left[#left + 1] = name end
      figures[#figures + 1] = name .. ':' .. avail .. ':' .. s.claimed .. ':' .. s.placed
    end
  end
  units = units - own.admitted
  if share then
    units = units - share.admitted
    busy = busy + share.busy
  end
  table.sort(left)
  table.sort(figures)
  return units, busy, left, figures
end
-- useReservation records that this step uses the ledger's reservation
-- (share.res) and returns the units it may admit by it, the grant, and
-- false; or none and true when the line used a later reservation already
-- (the ledger may have released this one's units with that step's
-- report: the caller may reserve again). No share: no cap (nil).
local function useReservation(share)
  if not share then return nil, false end
  if share.res <= tonumber(redis.call('HGET', ST, 'stockRes') or '0') then return 0, true end
  redis.call('HSET', ST, 'stockRes', share.res)
  return share.grant, false
end
-- snapshotOf is what the line holds after the step, for the ledger (see
-- the snapshot type in stockshare.go), as JSON. An order that names no
-- SKU (redeemed by the order worker without the gateway's claim) holds a
-- unit of any SKU of the queue, as an unordered shopper does.
local function snapshotOf(own)
  local skus, admitted = {}, own.admitted
  for name, s in pairs(own.skus) do
    if name == '' then
      admitted = admitted + s.claimed
    else
      skus[name] = {avail = s.avail, ver = s.ver, claimed = s.claimed, placed = s.placed}
    end
  end
  return cjson.encode({ver = redis.call('HINCRBY', ST, 'stockSnap', 1),
    res = tonumber(redis.call('HGET', ST, 'stockRes') or '0'),
    admitted = admitted, waiting = redis.call('ZCARD', W), skus = skus})
end
-- shareOf decodes the ledger's figures the caller passed ('': none).
local function shareOf(arg)
  if not arg or arg == '' then return nil end
  local share = cjson.decode(arg)
  if type(share.skus) ~= 'table' then share.skus = {} end
  for _, s in pairs(share.skus) do
    if type(s.avail) ~= 'number' then s.avail = nil end
  end
  return share
end
`

// ledgerLua is the prologue of the ledger's scripts. KEYS[1] is the
// queue's record (keyspace.StockShare); ARGV[1] the ledger's prefix,
// ARGV[2] the request as JSON.
//
// record(q) reads queue q's record: {reported (a snapshot is recorded),
// at (when, ms), tick (its tick length, ms), admitted, waiting, reserved
// (units of its reservations on the way), claimed = {sku = units},
// placed = {sku = units}}. The record's fields: res, ver (the snapshot's
// order, see the snapshot type), next (the last reservation id given),
// admitted, waiting, skus (comma separated), at, tick, c:<sku> and p:<sku>
// (claimed and placed units), r:<id> (a reservation's units).
const ledgerLua = `
local L, req = ARGV[1], cjson.decode(ARGV[2])
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function record(q)
  local r = {reported = false, at = 0, tick = 0, admitted = 0, waiting = 0, reserved = 0, claimed = {}, placed = {}}
  local flat = redis.call('HGETALL', L .. 'q:' .. q)
  for i = 1, #flat, 2 do
    local f, v = flat[i], tonumber(flat[i + 1])
    local kind, name = string.match(f, '^(%a):(.+)$')
    if kind == 'c' then r.claimed[name] = v
    elseif kind == 'p' then r.placed[name] = v
    elseif kind == 'r' then r.reserved = r.reserved + v
    elseif f == 'at' then r.at, r.reported = v, true
    elseif f == 'tick' or f == 'admitted' or f == 'waiting' then r[f] = v
    end
  end
  return r
end
`

// reserveScript reserves units for one admission step of queue req.queue,
// which sells req.skus and shares them with req.peers (the catalog's) and
// any queue that reported one of them lately (within two of its ticks and
// a second). req.want: the most the step may admit.
// Invariant: what every queue sharing the SKUs may hold — each one's last
// report, its reservations on the way, and this grant — never exceeds the
// SKUs' units less their claims; while other lines wait too, one step gets
// no more than an even share of what is left, so no line takes every unit
// for a step that admits one; a peer that never reported gets nobody a
// grant.
// Returns the reservation (see the reservation type) as JSON: the id
// counts up, grant or none.
var reserveScript = script.New(ledgerLua + `
local q, rk = req.queue, KEYS[1]
local n = now()
local others, blocked = {}, false
for _, p in ipairs(req.peers) do
  if p ~= q then
    local r = record(p)
    if r.reported then others[p] = r else blocked = true end
  end
end
for _, name in ipairs(req.skus) do
  for _, p in ipairs(redis.call('HKEYS', L .. 'sku:' .. name)) do
    if p ~= q and not others[p] then
      local r = record(p)
      if r.reported and n - r.at <= 2 * r.tick + 1000 then others[p] = r end
    end
  end
end
local share = {admitted = 0, busy = 0, skus = {}}
for _, name in ipairs(req.skus) do
  local f = redis.call('HMGET', L .. 'avail', name, name .. ':v')
  share.skus[name] = {avail = tonumber(f[1]), ver = tonumber(f[2] or '0'), claimed = 0}
end
local waitingLines = 1
for _, r in pairs(others) do
  share.admitted = share.admitted + r.admitted + r.reserved
  share.busy = share.busy + r.admitted + r.reserved
  for name, s in pairs(share.skus) do
    s.claimed = s.claimed + (r.claimed[name] or 0)
    share.busy = share.busy + (r.claimed[name] or 0) + (r.placed[name] or 0)
  end
  if r.waiting > 0 then waitingLines = waitingLines + 1 end
end
-- What this queue could take by the ledger's count: its own holdings as
-- it last reported them, with its reservations on the way.
local own = record(q)
local units, known = -(share.admitted + own.admitted + own.reserved), false
for name, s in pairs(share.skus) do
  if s.avail then
    units = units + s.avail
    known = true
  end
  units = units - s.claimed - (own.claimed[name] or 0)
end
local grant = 0
if not blocked and known and units > 0 then
  grant = math.min(req.want, math.ceil(units / waitingLines))
end
share.res = redis.call('HINCRBY', rk, 'next', 1)
share.grant = grant
if grant > 0 then redis.call('HSET', rk, 'r:' .. share.res, grant) end
redis.call('EXPIRE', rk, req.ttl)
return cjson.encode(share)
`)

// reportScript records a line's snapshot (req.snap, see the snapshot
// type) of queue req.queue, whose ticks are req.tick ms apart (0: as
// recorded; a claim's report does not know).
// Invariants: the record holds the latest snapshot the line took, never
// one that a later one overtook on the way; a reservation is released
// once the record holds a snapshot the line took after using it (its id
// at or below the snapshot's res: that snapshot counts its admissions);
// each SKU's units are the latest version any report carried (the line
// reads the store's figure and its own placements in one step, so a
// snapshot that no longer counts a placed order's claim carries a figure
// without its units); reservation ids keep counting up past whatever the
// line used (after the ledger lost its record).
var reportScript = script.New(ledgerLua + `
local q, rk, snap = req.queue, KEYS[1], req.snap
if type(snap.skus) ~= 'table' then snap.skus = {} end
for name, s in pairs(snap.skus) do
  if type(s.avail) == 'number' then
    local had = tonumber(redis.call('HGET', L .. 'avail', name .. ':v') or '-1')
    if s.ver > had then redis.call('HSET', L .. 'avail', name, s.avail, name .. ':v', s.ver) end
  end
end
redis.call('EXPIRE', L .. 'avail', req.ttl)
local cur = redis.call('HMGET', rk, 'res', 'ver', 'skus', 'next')
local res, ver = tonumber(cur[1] or '-1'), tonumber(cur[2] or '-1')
if snap.res > res or (snap.res == res and snap.ver > ver) then
  local gone = {}
  for name in string.gmatch(cur[3] or '', '[^,]+') do gone[name] = true end
  for _, f in ipairs(redis.call('HKEYS', rk)) do
    if string.match(f, '^[cp]:') then redis.call('HDEL', rk, f) end
  end
  local names = {}
  for name, s in pairs(snap.skus) do
    names[#names + 1] = name
    gone[name] = nil
    redis.call('HSET', rk, 'c:' .. name, s.claimed, 'p:' .. name, s.placed)
    redis.call('HSET', L .. 'sku:' .. name, q, 1)
    redis.call('EXPIRE', L .. 'sku:' .. name, req.ttl)
  end
  for name in pairs(gone) do redis.call('HDEL', L .. 'sku:' .. name, q) end
  table.sort(names)
  redis.call('HSET', rk, 'res', snap.res, 'ver', snap.ver, 'admitted', snap.admitted, 'waiting', snap.waiting,
    'skus', table.concat(names, ','), 'at', now())
  if req.tick > 0 then redis.call('HSET', rk, 'tick', req.tick) end
  res = snap.res
end
for _, f in ipairs(redis.call('HKEYS', rk)) do
  local id = string.match(f, '^r:(%d+)$')
  if id and tonumber(id) <= res then redis.call('HDEL', rk, f) end
end
if tonumber(cur[4] or '0') < res then redis.call('HSET', rk, 'next', res) end
redis.call('EXPIRE', rk, req.ttl)
return 1
`)

// ledgerStockScript records SKUs' units as the store reported them
// (req.levels: {sku, avail, ver}), unless the ledger has a later version.
// Invariant: a figure newer than the holdings the ledger counts can only
// count the units placed since twice (gone from the store, still claimed
// until their queue's next report), never not at all: the reports carry
// each placement's figure with the holdings that leave it out (see
// reportScript).
var ledgerStockScript = script.New(ledgerLua + `
for _, l in ipairs(req.levels) do
  local had = tonumber(redis.call('HGET', L .. 'avail', l.sku .. ':v') or '-1')
  if l.ver > had then redis.call('HSET', L .. 'avail', l.sku, l.avail, l.sku .. ':v', l.ver) end
end
redis.call('EXPIRE', L .. 'avail', req.ttl)
return 1
`)

// cancelScript releases reservation req.res of queue req.queue, which the
// line refused before using it (the tick was not due, or a guard of the
// admission at once held).
var cancelScript = script.New(ledgerLua + `
redis.call('HDEL', KEYS[1], 'r:' .. req.res)
return 1
`)

// withdrawScript takes queue req.queue out of the ledger: it no longer
// follows stock, or it was deleted. Its reservation ids keep counting.
var withdrawScript = script.New(ledgerLua + `
local rk = KEYS[1]
for name in string.gmatch(redis.call('HGET', rk, 'skus') or '', '[^,]+') do
  redis.call('HDEL', L .. 'sku:' .. name, req.queue)
end
for _, f in ipairs(redis.call('HKEYS', rk)) do
  if f ~= 'next' then redis.call('HDEL', rk, f) end
end
return 1
`)

// ledgerRequest is the argument of every ledger script (ARGV[2], as
// JSON); each reads the fields it needs (see each script's comment).
type ledgerRequest struct {
	Queue string `json:"queue"`
	TTL   int    `json:"ttl"` // seconds the keys it writes are kept (keyspace.StockShareTTL)
	// reserveScript: the queue's SKUs, its peers and the most to grant.
	SKUs  []string `json:"skus"`
	Peers []string `json:"peers"`
	Want  int      `json:"want"`
	// reportScript: the line's snapshot and its tick length in ms (0:
	// unknown, keep the recorded one).
	Snap *snapshot `json:"snap,omitempty"`
	Tick int64     `json:"tick"`
	// cancelScript: the reservation to release.
	Res int64 `json:"res"`
	// ledgerStockScript: the store's figures.
	Levels []stockFigure `json:"levels"`
}

type stockFigure struct {
	SKU   string `json:"sku"`
	Avail int64  `json:"avail"`
	Ver   int64  `json:"ver"`
}

// ledger runs one of the ledger's scripts with req.
func (s *Store) ledger(ctx context.Context, sc *script.Script, req ledgerRequest) *redis.Cmd {
	req.TTL = ledgerTTL
	// Lua reads a JSON null as a value, not as nothing: lists go as [].
	for _, l := range []*[]string{&req.SKUs, &req.Peers} {
		if *l == nil {
			*l = []string{}
		}
	}
	if req.Levels == nil {
		req.Levels = []stockFigure{}
	}
	b, err := json.Marshal(req)
	if err != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	return s.run(ctx, sc, []string{keyspace.StockShare(req.Queue)}, keyspace.StockLedger, string(b))
}

// reserve asks the ledger for up to want units for an admission step of
// q (see reserveScript). It returns the reservation, and the ledger's
// answer as the line's admission step takes it.
func (s *Store) reserve(ctx context.Context, q string, sh Share, want int) (reservation, string, error) {
	out, err := s.ledger(ctx, reserveScript, ledgerRequest{Queue: q, SKUs: sh.SKUs, Peers: sh.Peers, Want: max(want, 0)}).Text()
	if err != nil {
		return reservation{}, "", fmt.Errorf("reserve stock for %s: %w", q, err)
	}
	var r reservation
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return reservation{}, "", fmt.Errorf("reserve stock for %s: %w", q, err)
	}
	return r, out, nil
}

// report records the line's snapshot (as the admission step returned it)
// in the ledger (see reportScript); tick is q's tick length in ms (0:
// unknown).
func (s *Store) report(ctx context.Context, q string, tick int64, snap string) error {
	var sn snapshot
	err := json.Unmarshal([]byte(snap), &sn)
	if err == nil {
		err = s.ledger(ctx, reportScript, ledgerRequest{Queue: q, Tick: tick, Snap: &sn}).Err()
	}
	if err != nil {
		return fmt.Errorf("report the stock of %s: %w", q, err)
	}
	return nil
}

// cancel releases reservation res of q, which the line refused unused.
func (s *Store) cancel(ctx context.Context, q string, res int64) error {
	if err := s.ledger(ctx, cancelScript, ledgerRequest{Queue: q, Res: res}).Err(); err != nil {
		return fmt.Errorf("release the stock reserved for %s: %w", q, err)
	}
	return nil
}

// Withdraw takes q out of the stock ledger: its line no longer counts for
// the queues it shared SKUs with (it was deleted, or no longer follows
// stock; see Forget and Admit).
func (s *Store) Withdraw(ctx context.Context, q string) error {
	if err := s.ledger(ctx, withdrawScript, ledgerRequest{Queue: q}).Err(); err != nil {
		return fmt.Errorf("withdraw %s from the stock ledger: %w", q, err)
	}
	return nil
}

// ledgerTTL is keyspace.StockShareTTL in seconds.
const ledgerTTL = int(keyspace.StockShareTTL / time.Second)
