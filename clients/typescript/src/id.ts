interface CryptoLike {
  randomUUID?: () => string
  getRandomValues?: <T extends Uint8Array>(array: T) => T
}

/**
 * A random (version 4) UUID for an event_id. Uses crypto.randomUUID where it exists, else
 * crypto.getRandomValues (browsers on plain http, where randomUUID is missing), else
 * Math.random (only runtimes without Web Crypto, e.g. Node 18 started with
 * --no-experimental-global-webcrypto). An event_id needs uniqueness, not secrecy.
 */
export function randomUuid(): string {
  const c = (globalThis as { crypto?: CryptoLike }).crypto
  if (c && typeof c.randomUUID === 'function') return c.randomUUID()
  const bytes = new Uint8Array(16)
  if (c && typeof c.getRandomValues === 'function') c.getRandomValues(bytes)
  else for (let i = 0; i < bytes.length; i++) bytes[i] = Math.floor(Math.random() * 256)
  bytes[6] = (bytes[6]! & 0x0f) | 0x40 // version 4
  bytes[8] = (bytes[8]! & 0x3f) | 0x80 // variant 10
  let hex = ''
  for (const b of bytes) hex += b.toString(16).padStart(2, '0')
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`
}

// What the server accepts as an event_id: an RFC 9562 UUID (versions 1-8), nil or max.
const UUID = /^([0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}|00000000-0000-0000-0000-000000000000|ffffffff-ffff-ffff-ffff-ffffffffffff)$/i

export function isUuid(s: string): boolean {
  return UUID.test(s)
}
