"""The OpenAI Agents SDK (PyPI openai-agents) against `shoal serve` with
Qwen2.5-Coder-0.5B, through its Chat Completions model: an agent with a
function tool and a structured output type. The SDK sends tool_choice
"required" for the first turn (a grammar-held call), runs the Python
function, then asks again with the tools and response_format json_schema
(strict) for the pydantic type; the reply must parse into it."""
import asyncio

from pydantic import BaseModel


class Weather(BaseModel):
    city: str
    temperature_celsius: int
    sunny: bool


def test_agent_calls_a_function_tool_and_returns_structured_output(qwen):
    from agents import (Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool,
                        set_tracing_disabled)
    from openai import AsyncOpenAI
    set_tracing_disabled(True)
    calls = []

    @function_tool
    def get_weather(city: str) -> str:
        """Returns the current weather in a city."""
        calls.append(city)
        return f"The weather in {city} is sunny, 21 degrees Celsius."

    async def run():
        client = AsyncOpenAI(base_url=qwen.base + "/v1", api_key="unused", max_retries=0)
        model = OpenAIChatCompletionsModel(model="default", openai_client=client)
        agent = Agent(name="weather", instructions="Answer with the weather tool.", tools=[get_weather],
                      model=model, output_type=Weather,
                      model_settings=ModelSettings(temperature=0, tool_choice="required"))
        return await Runner.run(agent, "What is the weather in Paris?", max_turns=4)

    result = asyncio.run(run())
    assert calls == ["Paris"]
    assert isinstance(result.final_output, Weather)
    assert result.final_output.city == "Paris" and result.final_output.temperature_celsius == 21
