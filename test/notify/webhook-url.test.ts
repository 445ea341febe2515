/** Webhook URL validation, masking, the SSRF address ranges and the message text: pure functions. */
import { describe, expect, it } from 'vitest'
import { isBlockedAddress } from '../../src/notify/address-policy.ts'
import { parseRetryAfter } from '../../src/notify/attempt.ts'
import { formatUsd, pauseMessage } from '../../src/notify/message.ts'
import { checkWebhookUrl, maskWebhookUrl } from '../../src/notify/webhook.ts'

describe('checkWebhookUrl', () => {
  it.each([
    'https://hooks.slack.com/services/x',
    'https://discord.com/api/webhooks/1/abc/slack',
    'http://chat.example.com:8065/hooks/abc',
    'https://93.184.216.34/hook',
    'https://[2606:4700::1111]/hook',
  ])('accepts %s', (url) => {
    expect(checkWebhookUrl(url, false)).toBeNull()
  })

  it.each([
    ['ftp://example.com/hook', 'http or https'],
    ['file:///etc/passwd', 'http or https'],
    ['javascript:alert(1)', 'http or https'],
    ['not a url', 'not a valid'],
    ['http://user:pw@example.com/', 'credentials'],
    ['http://token@example.com/', 'credentials'],
    ['http://169.254.169.254/', 'non-public'],
    ['http://[::1]/', 'non-public'],
    ['http://10.0.0.1/', 'non-public'],
    ['http://127.0.0.1:8080/', 'non-public'],
    ['http://0.0.0.0/', 'non-public'],
    ['http://[::]/', 'non-public'],
    ['http://[::ffff:127.0.0.1]/', 'non-public'], // IPv4-mapped IPv6
    ['http://[::ffff:a9fe:a9fe]/', 'non-public'], // 169.254.169.254, mapped, in hex
    ['http://2130706433/', 'non-public'], // 127.0.0.1 as one decimal number
    ['http://0x7f.1/', 'non-public'], // 127.0.0.1 in hex shorthand
    [`https://example.com/${'a'.repeat(2048)}`, 'at most'],
  ])('rejects %s', (url, reason) => {
    expect(checkWebhookUrl(url, false)).toContain(reason)
  })

  it('accepts private literals when WEBHOOK_ALLOW_PRIVATE is on, but still not other schemes or credentials', () => {
    expect(checkWebhookUrl('http://10.0.0.1/', true)).toBeNull()
    expect(checkWebhookUrl('http://[::1]:3000/hook', true)).toBeNull()
    expect(checkWebhookUrl('ftp://10.0.0.1/', true)).toContain('http or https')
    expect(checkWebhookUrl('http://u:p@10.0.0.1/', true)).toContain('credentials')
  })
})

describe('isBlockedAddress', () => {
  it.each([
    '127.0.0.1', '127.255.255.254', '10.1.2.3', '172.16.0.1', '172.31.255.255', '192.168.1.1',
    '100.64.0.1', '100.100.100.200', '169.254.169.254', '0.0.0.0', '224.0.0.1', '255.255.255.255',
    '::', '::1', 'fd00:ec2::254', 'fc00::1', 'fe80::1', 'ff02::1',
    '::ffff:127.0.0.1', '::ffff:10.0.0.1', '::ffff:169.254.169.254', '64:ff9b::10.0.0.1',
  ])('blocks %s', (address) => {
    expect(isBlockedAddress(address)).toBe(true)
  })

  it.each(['93.184.216.34', '8.8.8.8', '172.32.0.1', '100.128.0.1', '2606:4700::1111', '::ffff:8.8.8.8', '64:ff9b::8.8.8.8'])(
    'allows %s',
    (address) => {
      expect(isBlockedAddress(address)).toBe(false)
    },
  )
})

describe('maskWebhookUrl', () => {
  it('keeps scheme and host and at most the last 4 characters of the path', () => {
    const url = 'https://hooks.slack.com/services/T0AAAAAAA/B0BBBBBBB/abcdefghijklmnopqrstXYZ1'
    expect(maskWebhookUrl(url)).toBe('https://hooks.slack.com/…XYZ1')
  })

  it('hides a short path and a query entirely', () => {
    expect(maskWebhookUrl('https://chat.example.com:8443/h/abc')).toBe('https://chat.example.com:8443/…')
    expect(maskWebhookUrl('https://chat.example.com/hook?token=s3cr3ts3cr3ts3cr3t')).toBe('https://chat.example.com/…')
    expect(maskWebhookUrl('https://chat.example.com/')).toBe('https://chat.example.com')
  })

  it('drops credentials and copes with an invalid URL', () => {
    expect(maskWebhookUrl('https://u:p@chat.example.com/')).toBe('https://chat.example.com')
    expect(maskWebhookUrl('not a url')).toBe('(invalid URL)')
  })
})

describe('pause message', () => {
  const at = new Date('2026-03-04T05:06:07.890Z')

  it('formats USD with two decimals, more only when needed', () => {
    expect(formatUsd(12.5)).toBe('$12.50')
    expect(formatUsd(10)).toBe('$10.00')
    expect(formatUsd(10.0004)).toBe('$10.0004')
    expect(formatUsd(1234)).toBe('$1,234.00')
  })

  it('escapes Slack control characters so an agent id cannot mention a channel or forge a link', () => {
    const { text } = pauseMessage({ id: 'n', userId: 'u', agentId: '<!channel> & <http://x|y>', totalUsd: 11, thresholdUsd: 10, at })
    expect(text).toBe(
      'burnrate paused agent `&lt;!channel&gt; &amp; &lt;http://x|y&gt;`: its 24 h spend $11.00 exceeded its daily budget of $10.00 (2026-03-04T05:06:07Z).',
    )
  })

  it('shows an agent id containing a backtick without a code span', () => {
    const { text } = pauseMessage({ id: 'n', userId: 'u', agentId: 'a`b', totalUsd: 11, thresholdUsd: 10, at })
    expect(text).toContain('paused agent a`b: ')
  })
})

describe('parseRetryAfter (RFC 9110 10.2.3)', () => {
  const now = Date.parse('2026-01-01T00:00:00Z')

  it('reads delay-seconds and HTTP-dates, capped', () => {
    expect(parseRetryAfter('1', 30_000, now)).toBe(1000)
    expect(parseRetryAfter(' 7 ', 30_000, now)).toBe(7000)
    expect(parseRetryAfter('3600', 30_000, now)).toBe(30_000)
    expect(parseRetryAfter('Thu, 01 Jan 2026 00:00:05 GMT', 30_000, now)).toBe(5000)
    expect(parseRetryAfter('Wed, 31 Dec 2025 23:00:00 GMT', 30_000, now)).toBe(0)
  })

  it('ignores absent or malformed values', () => {
    expect(parseRetryAfter(undefined, 30_000, now)).toBeUndefined()
    expect(parseRetryAfter('soon', 30_000, now)).toBeUndefined()
    expect(parseRetryAfter('-1', 30_000, now)).toBeUndefined()
    expect(parseRetryAfter('1.5', 30_000, now)).toBeUndefined()
    expect(parseRetryAfter('Someday', 30_000, now)).toBeUndefined()
  })
})
