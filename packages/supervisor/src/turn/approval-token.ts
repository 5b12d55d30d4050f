/**
 * An approval token (issue 26): `apr.<generation>.<callIndex>.<nonce>` names one wait of one
 * workstream's session — the nonce is fresh for each wait, so a token of an earlier wait, of
 * another workstream or of a workstream created again never matches (commands/approvals.ts).
 */
export function approvalToken(generation: number, callIndex: number, nonce: string): string {
  return `apr.${generation}.${callIndex}.${nonce}`;
}

export interface ParsedToken {
  readonly generation: number;
  readonly callIndex: number;
  readonly nonce: string;
}

export function parseApprovalToken(token: string): ParsedToken | undefined {
  const m = /^apr\.(\d{1,15})\.(\d{1,6})\.([0-9a-f-]{36})$/.exec(token);
  return m === null ? undefined : { generation: Number(m[1]), callIndex: Number(m[2]), nonce: m[3]! };
}
