"""A toolset whose tool answers with an image (MCP image content), the shape of tasksets written for
the original 0.4 release that check the image reached the tool message as an ``image_url`` part."""

import base64

import verifiers.v1 as vf

PIXEL = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()


class CameraToolset(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = "camera"

    @vf.tool
    def shoot(self) -> list:
        """Take a picture."""
        from mcp.types import ImageContent, TextContent

        return [TextContent(type="text", text="a picture"), ImageContent(type="image", data=PIXEL, mimeType="image/png")]


class CameraTaskConfig(vf.TaskConfig):
    tools: vf.ToolsetConfig = vf.ToolsetConfig()


class CameraTask(vf.Task[vf.TaskData, vf.State, CameraTaskConfig]):
    @classmethod
    def toolsets(cls, config: CameraTaskConfig) -> list[vf.Toolset]:
        return [CameraToolset(config.tools)]

    @vf.reward
    async def saw_image(self, trace: vf.Trace) -> float:
        for message in trace.tool_messages:
            if isinstance(message.content, list):
                for part in message.content:
                    if part.type == "image_url" and part.image_url.url == f"data:image/png;base64,{PIXEL}":
                        return 1.0
        return 0.0


class CameraConfig(vf.TasksetConfig):
    task: CameraTaskConfig = CameraTaskConfig()


class CameraTaskset(vf.Taskset[CameraTask, CameraConfig]):
    def load(self) -> list[CameraTask]:
        return [CameraTask(vf.TaskData(idx=0, prompt="Take a picture, then say done."), self.config.task)]


__all__ = ["CameraTaskset"]
