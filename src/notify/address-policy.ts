/**
 * Which webhook targets burnrate may call (SSRF guard) and how a webhook URL is shown.
 *
 * A chat webhook URL is supplied by an API user, so without a guard burnrate would POST to
 * whatever it names: the cloud metadata service, an admin port on loopback, a database on the
 * private network. Targets on such addresses are refused unless WEBHOOK_ALLOW_PRIVATE=true.
 */
import dns from 'node:dns'
import net from 'node:net'
import type { LookupFunction } from 'node:net'

const MAX_URL_LENGTH = 2048

/** IPv4 ranges that are not the public internet (IANA special-purpose registry, RFC 6890). */
const IPV4_RANGES: ReadonlyArray<readonly [string, number]> = [
  ['0.0.0.0', 8], // "this network", includes the unspecified address (RFC 1122 3.2.1.3)
  ['10.0.0.0', 8], // private (RFC 1918)
  ['100.64.0.0', 10], // carrier-grade NAT (RFC 6598); Alibaba's metadata service lives here
  ['127.0.0.0', 8], // loopback (RFC 1122)
  ['169.254.0.0', 16], // link-local (RFC 3927), incl. 169.254.169.254 cloud metadata
  ['172.16.0.0', 12], // private (RFC 1918)
  ['192.0.0.0', 24], // IETF protocol assignments (RFC 6890)
  ['192.168.0.0', 16], // private (RFC 1918)
  ['198.18.0.0', 15], // benchmarking (RFC 2544)
  ['224.0.0.0', 4], // multicast (RFC 5771)
  ['240.0.0.0', 4], // reserved, incl. 255.255.255.255 broadcast (RFC 1112, RFC 919)
]

/** IPv6 ranges that are not the public internet (IANA IPv6 special-purpose registry). */
const IPV6_RANGES: ReadonlyArray<readonly [string, number]> = [
  ['::', 96], // unspecified ::, loopback ::1 and deprecated IPv4-compatible ::a.b.c.d (RFC 4291 2.5)
  ['64:ff9b:1::', 48], // local-use NAT64 (RFC 8215)
  ['100::', 64], // discard-only (RFC 6666)
  ['2001::', 32], // Teredo: embeds an IPv4 address (RFC 4380)
  ['2002::', 16], // 6to4: embeds an IPv4 address (RFC 3056, deprecated by RFC 7526)
  ['fc00::', 7], // unique local, incl. AWS IMDS fd00:ec2::254 (RFC 4193)
  ['fe80::', 10], // link-local (RFC 4291)
  ['fec0::', 10], // site-local, deprecated (RFC 3879)
  ['ff00::', 8], // multicast (RFC 4291)
]

function buildBlockList(): net.BlockList {
  const list = new net.BlockList()
  for (const [address, prefix] of IPV4_RANGES) {
    list.addSubnet(address, prefix, 'ipv4')
    // The same IPv4 ranges written as IPv6: IPv4-mapped ::ffff:a.b.c.d (RFC 4291 2.5.5.2) and
    // NAT64 64:ff9b::a.b.c.d (RFC 6052), which a NAT64 gateway forwards to the IPv4 address.
    list.addSubnet(`::ffff:${address}`, 96 + prefix, 'ipv6')
    list.addSubnet(`64:ff9b::${address}`, 96 + prefix, 'ipv6')
  }
  for (const [address, prefix] of IPV6_RANGES) list.addSubnet(address, prefix, 'ipv6')
  return list
}

const blockList = buildBlockList()

/** True when an IP address literal lies in a loopback, private, link-local or other non-public range. */
export function isBlockedAddress(address: string): boolean {
  const family = net.isIP(address)
  if (family === 0) return false
  return blockList.check(address, family === 4 ? 'ipv4' : 'ipv6')
}

/** A target refused by the SSRF guard; final, never retried. */
export class BlockedAddressError extends Error {
  override name = 'BlockedAddressError'
  readonly code = 'ERR_WEBHOOK_BLOCKED_ADDRESS'
  readonly hostname: string
  readonly address: string
  constructor(hostname: string, address: string) {
    super(`webhook host ${hostname} resolves to non-public address ${address}`)
    this.hostname = hostname
    this.address = address
  }
}

/**
 * A `lookup` for http(s).request that refuses non-public addresses. Node connects to the address
 * this returns, so the check applies to the address actually dialled: a DNS answer checked
 * beforehand could change by connect time (DNS rebinding). If any answer is non-public the whole
 * lookup fails, so a name mixing public and private answers cannot reach the private one.
 * Node calls it with `all: true` when it races address families (autoSelectFamily), so both
 * calling conventions are served.
 */
export const guardedLookup: LookupFunction = (hostname, options, callback) => {
  dns.lookup(hostname, { ...options, all: true }, (err, addresses) => {
    if (err) return callback(err, [])
    const blocked = addresses.find((a) => isBlockedAddress(a.address))
    if (blocked) return callback(new BlockedAddressError(hostname, blocked.address), [])
    const first = addresses[0]
    // dns.lookup reports ENOTFOUND rather than an empty list, so `first` is there in practice.
    if (options.all === true || first === undefined) return callback(null, addresses)
    return callback(null, first.address, first.family)
  })
}

/** The host of a URL without brackets around IPv6 literals, as net.isIP expects it. */
function bareHostname(url: URL): string {
  return url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname
}

/**
 * Validates a webhook URL when it is configured: http(s) only, no credentials in the URL, and
 * literal IP hosts must be public unless `allowPrivate`. Host names are checked when the message
 * is sent (guardedLookup), because DNS answers change. Returns an error message or null.
 * The WHATWG URL parser normalises odd IPv4 spellings (http://2130706433/, http://0x7f.1/) to
 * dotted quads first, so they cannot slip past the check.
 */
export function checkWebhookUrl(url: string, allowPrivate: boolean): string | null {
  if (url.length > MAX_URL_LENGTH) return `webhook URL must be at most ${MAX_URL_LENGTH} characters`
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    return 'webhook URL is not a valid absolute URL'
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') return 'webhook URL must use http or https'
  // Userinfo would be sent as Basic auth and is deprecated in http(s) URLs (RFC 9110 4.2.4).
  if (parsed.username !== '' || parsed.password !== '') return 'webhook URL must not contain credentials'
  if (parsed.hostname === '') return 'webhook URL must name a host'
  if (!allowPrivate && isBlockedAddress(bareHostname(parsed))) {
    return 'webhook URL must not target a loopback, private, link-local or otherwise non-public address (set WEBHOOK_ALLOW_PRIVATE=true to allow)'
  }
  return null
}

/**
 * The URL as read responses and logs may show it. In an incoming-webhook URL the path (and any
 * query) is the secret, so only scheme, host and at most the last 4 characters of a long path
 * are kept: "https://hooks.slack.com/…XYZ1".
 */
export function maskWebhookUrl(url: string): string {
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    return '(invalid URL)'
  }
  const path = parsed.pathname
  // Showing 4 characters of a short path would give away too large a share of it.
  const tail = path.length >= 16 ? path.slice(-4) : ''
  const hidden = path.length > 1 || parsed.search !== '' ? `/…${tail}` : ''
  return `${parsed.protocol}//${parsed.host}${hidden}`
}

/** The host (and port) of a URL for log lines, never the secret path. */
export function webhookHost(url: string): string {
  try {
    return new URL(url).host
  } catch {
    return '(invalid URL)'
  }
}
