"""Streams one greedy completion from a Shoal server with the official
`openai` client and prints each piece of text as a JSON line as it arrives,
then {"done": finish_reason} (or {"error": message}). Run inside a test's
network namespace, where the test process itself cannot reach the server.

    python3 stream_client.py BASE_URL PROMPT MAX_TOKENS
"""
import json
import sys

import openai


def main():
    base, prompt, max_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=300)
    try:
        model = client.models.list().data[0].id
        stream = client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0,
                                           stream=True, extra_body={"ignore_eos": True})
        finish = None
        for chunk in stream:
            choice = chunk.choices[0]
            if choice.text:
                print(json.dumps({"text": choice.text}), flush=True)
            finish = choice.finish_reason or finish
        print(json.dumps({"done": finish}), flush=True)
    except openai.APIError as e:
        print(json.dumps({"error": str(e)}), flush=True)


if __name__ == "__main__":
    main()
