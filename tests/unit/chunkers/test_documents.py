"""Converted documents: PDF, DOCX, PPTX, XLSX, HTML and CSV, and corrupt ones refused."""

from __future__ import annotations

import io

import pytest

from recalld.chunkers import chunk_file
from recalld.errors import ParseError


def make_pdf(pages: list[str]) -> bytes:
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    buffer = io.BytesIO()
    pdf = canvas.Canvas(buffer, pagesize=A4)
    for page in pages:
        y = 780
        for line in page.split("\n"):
            pdf.drawString(72, y, line)
            y -= 16
        pdf.showPage()
    pdf.save()
    return buffer.getvalue()


def make_docx() -> bytes:
    import docx

    document = docx.Document()
    document.add_heading("Quarterly report", level=1)
    document.add_paragraph("Revenue grew in Lisbon after the office opened in March.")
    document.add_heading("Risks", level=2)
    document.add_paragraph("Hiring in Porto is slower than planned.")
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text = "city"
    table.cell(0, 1).text = "staff"
    table.cell(1, 0).text = "Lisbon"
    table.cell(1, 1).text = "42"
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def make_pptx() -> bytes:
    from pptx import Presentation

    deck = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[1])
    slide.shapes.title.text = "Roadmap"
    slide.placeholders[1].text = "Ship the memory daemon in autumn"
    buffer = io.BytesIO()
    deck.save(buffer)
    return buffer.getvalue()


def make_xlsx() -> bytes:
    from openpyxl import Workbook

    book = Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.title = "Budget"
    sheet.append(["item", "cost"])
    sheet.append(["servers", 1200])
    sheet.append(["zebra food", 35])
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


def test_pdf_text_is_chunked() -> None:
    data = make_pdf(["Quarterly report: revenue grew in Lisbon.", "Page two is about zebras."])
    result = chunk_file("report.pdf", data)
    assert (result.kind, result.format) == ("text", "pdf")
    text = "\n".join(c.text for c in result.chunks)
    assert "revenue grew in Lisbon" in text and "zebras" in text
    assert all(c.meta["format"] == "pdf" for c in result.chunks)


def test_truncated_pdf_is_a_parse_error() -> None:
    data = make_pdf(["Quarterly report: revenue grew in Lisbon."] * 3)
    with pytest.raises(ParseError) as info:
        chunk_file("report.pdf", data[: len(data) // 2])
    assert info.value.data["path"] == "report.pdf"
    assert "pdf" in info.value.data["reason"]


def test_not_a_pdf_is_a_parse_error() -> None:
    with pytest.raises(ParseError) as info:
        chunk_file("report.pdf", b"hello, I am plain text " * 20)
    assert info.value.data["reason"] == "no %PDF- header"


def test_docx_keeps_headings() -> None:
    result = chunk_file("report.docx", make_docx())
    assert result.format == "docx"
    paths = [c.meta["heading_path"] for c in result.chunks]
    assert "Quarterly report" in paths and "Quarterly report > Risks" in paths
    text = "\n".join(c.text for c in result.chunks)
    assert "Revenue grew in Lisbon" in text and "| Lisbon | 42 |" in text


@pytest.mark.parametrize("junk", [b"junk not a docx at all " * 10, b"PK\x03\x04garbage" * 20])
def test_junk_docx_is_a_parse_error(junk: bytes) -> None:
    with pytest.raises(ParseError) as info:
        chunk_file("report.docx", junk)
    assert info.value.data["path"] == "report.docx"
    assert "DOCX" in info.value.data["reason"]


def test_a_zip_that_is_not_a_docx_is_a_parse_error() -> None:
    with pytest.raises(ParseError):
        chunk_file("slides.docx", make_pptx())


def test_pptx() -> None:
    result = chunk_file("deck.pptx", make_pptx())
    text = "\n".join(c.text for c in result.chunks)
    assert "Roadmap" in text and "memory daemon" in text


def test_xlsx() -> None:
    result = chunk_file("budget.xlsx", make_xlsx())
    text = "\n".join(c.text for c in result.chunks)
    assert "zebra food" in text and "Budget" in text


def test_html() -> None:
    page = (
        "<html><head><title>Notes</title><style>p {color: red}</style></head><body>"
        "<h1>Trip</h1><p>We flew to Lisbon on Tuesday.</p>"
        "<h2>Food</h2><ul><li>pastel de nata</li><li>bacalhau</li></ul></body></html>"
    )
    result = chunk_file("notes.html", page.encode())
    assert result.format == "html"
    paths = [c.meta["heading_path"] for c in result.chunks]
    assert paths == ["Trip", "Trip > Food"]
    assert "color: red" not in "".join(c.text for c in result.chunks)


def test_csv() -> None:
    rows = "name,city\n" + "\n".join(f"person {i},city {i}" for i in range(200))
    result = chunk_file("people.csv", rows.encode())
    assert result.format == "csv"
    assert len(result.chunks) > 1
    for chunk in result.chunks:
        # Every piece of the table repeats its header row.
        assert chunk.text.startswith("| name | city |")
    assert "person 199" in result.chunks[-1].text


def test_binary_html_is_refused() -> None:
    with pytest.raises(ParseError):
        chunk_file("page.html", bytes(range(256)) * 16)
