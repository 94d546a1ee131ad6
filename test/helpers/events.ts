import { randomUUID } from 'node:crypto';

/** A realistic analytics event (~570 bytes of JSON), SunGlasses-shaped. */
export function sampleEvent(i: number, distinctId = randomUUID()): Record<string, unknown> {
  return {
    event_type: i % 5 === 0 ? 'screen' : 'track',
    event: ['app_open', 'button_click', 'purchase', 'page_view', 'signup'][i % 5],
    distinct_id: distinctId,
    anonymous_id: randomUUID(),
    ts: new Date(Date.now() - (i % 1000) * 1000).toISOString(),
    message_id: randomUUID(),
    properties: {
      screen: `screen_${i % 17}`,
      button: `btn_${i % 7}`,
      value: i * 1.5,
      currency: 'EUR',
      items: i % 4,
      experiment: 'exp-42',
      variant: i % 2 ? 'a' : 'b',
      first: i === 0,
    },
    context: {
      app: { name: 'demo', version: '3.1.4', build: '1204' },
      device: { model: 'Pixel 8', manufacturer: 'Google' },
      os: { name: 'Android', version: '15' },
      locale: 'fr-FR',
      timezone: 'Europe/Paris',
    },
    dt: new Date().toISOString().slice(0, 10),
  };
}

/** A push body of `n` events. */
export function batchBody(n: number, make: (i: number) => Record<string, unknown> = sampleEvent): string {
  return JSON.stringify({ data: { events: Array.from({ length: n }, (_, i) => make(i)) }, baseHash: null });
}
