/**
 * Checks a value against a tool's arguments schema — the part of JSON Schema tool definitions
 * use: `type` (one or a list), `properties`, `required`, `additionalProperties` (false or a
 * schema), `enum`, `const`, `items`, `minimum`/`maximum`, `minLength`/`maxLength`,
 * `minItems`/`maxItems`. Other keywords are not checked (the tool itself still refuses what it
 * cannot take). Returns the first problem, naming where (`arguments.amount`), or undefined.
 */
type Schema = Readonly<Record<string, unknown>>;

const typeOf = (v: unknown): string =>
  v === null
    ? 'null'
    : Array.isArray(v)
      ? 'array'
      : typeof v === 'number' && Number.isInteger(v)
        ? 'integer'
        : typeof v;

function matchesType(value: unknown, type: unknown): boolean {
  const types = Array.isArray(type) ? type : [type];
  const actual = typeOf(value);
  return types.some((t) => t === actual || (t === 'number' && actual === 'integer'));
}

export function schemaProblem(value: unknown, schema: Schema, at = 'arguments'): string | undefined {
  if (schema.type !== undefined && !matchesType(value, schema.type)) {
    return `${at} must be ${Array.isArray(schema.type) ? schema.type.join(' or ') : String(schema.type)}`;
  }
  if (Array.isArray(schema.enum) && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value))) {
    return `${at} must be one of ${schema.enum.map((e) => JSON.stringify(e)).join(', ')}`;
  }
  if ('const' in schema && JSON.stringify(schema.const) !== JSON.stringify(value)) {
    return `${at} must be ${JSON.stringify(schema.const)}`;
  }
  if (typeof value === 'number') {
    if (typeof schema.minimum === 'number' && value < schema.minimum)
      return `${at} must be ≥ ${schema.minimum}`;
    if (typeof schema.maximum === 'number' && value > schema.maximum)
      return `${at} must be ≤ ${schema.maximum}`;
  }
  if (typeof value === 'string') {
    if (typeof schema.minLength === 'number' && value.length < schema.minLength)
      return `${at} must be at least ${schema.minLength} characters`;
    if (typeof schema.maxLength === 'number' && value.length > schema.maxLength)
      return `${at} must be at most ${schema.maxLength} characters`;
  }
  if (Array.isArray(value)) {
    if (typeof schema.minItems === 'number' && value.length < schema.minItems)
      return `${at} must have at least ${schema.minItems} items`;
    if (typeof schema.maxItems === 'number' && value.length > schema.maxItems)
      return `${at} must have at most ${schema.maxItems} items`;
    const items = schema.items;
    if (typeof items === 'object' && items !== null && !Array.isArray(items)) {
      for (const [i, item] of value.entries()) {
        const problem = schemaProblem(item, items as Schema, `${at}[${i}]`);
        if (problem !== undefined) return problem;
      }
    }
  }
  if (typeOf(value) === 'object') {
    const object = value as Record<string, unknown>;
    const properties = (schema.properties ?? {}) as Record<string, Schema>;
    if (Array.isArray(schema.required)) {
      for (const key of schema.required) {
        if (typeof key === 'string' && !(key in object)) return `${at}.${key} is required`;
      }
    }
    for (const [key, v] of Object.entries(object)) {
      const own = properties[key];
      if (own !== undefined) {
        const problem = schemaProblem(v, own, `${at}.${key}`);
        if (problem !== undefined) return problem;
      } else if (schema.additionalProperties === false) {
        return `${at}.${key} is not an argument of the tool`;
      } else if (typeof schema.additionalProperties === 'object' && schema.additionalProperties !== null) {
        const problem = schemaProblem(v, schema.additionalProperties as Schema, `${at}.${key}`);
        if (problem !== undefined) return problem;
      }
    }
  }
  return undefined;
}
